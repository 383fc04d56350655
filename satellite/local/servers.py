"""The local server config: the ``mcpServers`` JSON MCP clients use, plus ``url``/``transport`` for remote
servers and an optional ``start`` command the local stack runs first. Pure, no I/O beyond reading the file.

Example::

    {
      "team": "dev",
      "mcpServers": {
        "everything": {
          "transport": "streamable_http",
          "url": "http://127.0.0.1:3101/mcp",
          "headers": {"Authorization": "Bearer ${EVERYTHING_TOKEN}"},
          "start": {"command": "node", "args": ["server.js"], "env": {"PORT": "3101"}}
        },
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}}
      }
    }

``transport`` is ``streamable_http`` (default when ``url`` is given) or ``sse``; Claude Code's
``"type": "http" | "sse" | "stdio"`` is accepted as well. An entry with ``command`` is a stdio server.
The key is the installation name; the slug is derived from it unless ``slug`` is given.

Relative paths of stdio servers resolve against the config file's folder (a worker runs each server in a
folder of its own, so they would mean nothing there): a ``command`` with a ``/`` in it, and every ``args``
item and ``env`` value that starts with ``./`` or ``../``. ``start`` commands run in the config file's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from satellite.errors import InvalidInstallation
from satellite.installation import Installation, Transport, derive_slug

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["LaunchSpec", "LocalServer", "load_servers", "parse_servers"]

_TYPE_ALIASES = {"http": Transport.STREAMABLE_HTTP, "streamable-http": Transport.STREAMABLE_HTTP}


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """A process the local stack starts before discovering a remote server."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LocalServer:
    installation: Installation
    start: LaunchSpec | None = None


def load_servers(path: Path, default_team: str = "dev") -> tuple[str, list[LocalServer]]:
    """Read a server config file; returns the team id and its servers.

    Raises:
        InvalidInstallation: the file is not valid JSON or an entry is invalid (the message names it).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInstallation("config", f"cannot read {path}: {exc}") from exc
    return parse_servers(data, default_team, base=path.resolve().parent)


def parse_servers(data: Any, default_team: str = "dev", *, base: Path | None = None) -> tuple[str, list[LocalServer]]:
    """Parse config data (see the module docstring); relative stdio paths resolve against ``base`` when given.

    Raises:
        InvalidInstallation: an entry is invalid; the field is prefixed with the entry's name.
    """
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise InvalidInstallation("mcpServers", "the config must be a JSON object with an 'mcpServers' object")
    team = str(data.get("team") or default_team)
    servers = []
    for name, entry in data["mcpServers"].items():
        try:
            servers.append(_server(team, str(name), entry, base))
        except InvalidInstallation as exc:
            raise InvalidInstallation(f"mcpServers.{name}.{exc.field}", exc.message) from exc
    return team, servers


def _server(team: str, name: str, entry: Any, base: Path | None) -> LocalServer:
    if not isinstance(entry, dict):
        raise InvalidInstallation("entry", "must be an object with 'url' or 'command'")
    kind = entry.get("transport") or entry.get("type")
    if kind is None:
        kind = Transport.STDIO if entry.get("command") and not entry.get("url") else Transport.STREAMABLE_HTTP
    try:
        transport = _TYPE_ALIASES.get(str(kind)) or Transport(str(kind))
    except ValueError as exc:
        choices = ", ".join(t.value for t in Transport)
        raise InvalidInstallation("transport", f"{kind!r} is not one of {choices}") from exc
    slug = str(entry["slug"]) if "slug" in entry else derive_slug(name)
    command = entry.get("command") if transport is Transport.STDIO else None
    args = tuple(str(a) for a in entry.get("args") or ())
    env = {str(k): str(v) for k, v in (entry.get("env") or {}).items()}
    if transport is Transport.STDIO and base is not None:
        if isinstance(command, str) and "/" in command and not os.path.isabs(command):
            command = os.path.normpath(base / command)
        args = tuple(_resolved(a, base) for a in args)
        env = {k: _resolved(v, base) for k, v in env.items()}
    installation = Installation(
        installation_id=hashlib.sha256(f"{team}/{name}".encode()).hexdigest()[:16],
        team_id=team,
        user_id=entry.get("user"),
        slug=slug,
        name=name,
        transport=transport,
        url=entry.get("url"),
        command=command,
        args=args,
        env=env,
        headers={str(k): str(v) for k, v in (entry.get("headers") or {}).items()},
        enabled=bool(entry.get("enabled", True)),
        timeout_seconds=entry.get("timeout_seconds"),
    )
    start = entry.get("start")
    launch = None
    if start is not None:
        if not isinstance(start, dict) or not start.get("command"):
            raise InvalidInstallation("start", "must be an object with a 'command' (and optional 'args', 'env')")
        launch = LaunchSpec(
            command=str(start["command"]),
            args=tuple(str(a) for a in start.get("args") or ()),
            env={str(k): str(v) for k, v in (start.get("env") or {}).items()},
        )
    return LocalServer(installation, launch)


def _resolved(value: str, base: Path) -> str:
    if value.startswith(("./", "../")):
        return os.path.normpath(base / value)
    return value
