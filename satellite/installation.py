"""Installations: the upstream MCP servers a team installed. Pure, no I/O."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from satellite.errors import InvalidInstallation

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "SLUG_PATTERN",
    "Installation",
    "Transport",
    "derive_slug",
    "resolve_placeholders",
    "validate_slug",
]

SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# An instance name such as ``filesystem-john-abc123`` ends with an owner and an id containing a digit.
_INSTANCE_NAME = re.compile(r"^(?P<slug>.+?)-[^-]+-[a-z0-9]*\d[a-z0-9]*$")


class Transport(StrEnum):
    """How the gateway talks to an upstream server."""

    STREAMABLE_HTTP = "streamable_http"
    SSE = "sse"
    STDIO = "stdio"

    @property
    def is_remote(self) -> bool:
        return self is not Transport.STDIO


def validate_slug(slug: str) -> str:
    """Return ``slug`` unchanged when it is a valid server slug.

    Raises:
        InvalidInstallation: the slug is empty, too long, or has characters other than
            lowercase letters, digits, ``-`` and ``_`` (it must start with a letter or digit).
    """
    if not SLUG_PATTERN.fullmatch(slug):
        raise InvalidInstallation(
            "slug",
            f"{slug!r} is not a valid slug: use 1-63 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit (for example 'github' or 'google-maps')",
        )
    return slug


def derive_slug(installation_name: str) -> str:
    """Derive a slug from an installation name, e.g. ``filesystem-john-abc123`` -> ``filesystem``.

    A per-user instance name ends with ``-<owner>-<id>`` where the id contains a digit; that tail
    is dropped. Unlike a split on the first hyphen, multi-word slugs survive:
    ``google-maps-john-abc123`` -> ``google-maps``.

    Raises:
        InvalidInstallation: nothing usable is left after normalising the name.
    """
    name = installation_name.strip().lower()
    if match := _INSTANCE_NAME.fullmatch(name):
        name = match["slug"]
    slug = re.sub(r"[^a-z0-9_-]+", "-", name).strip("-_")[:63]
    return validate_slug(slug)


def resolve_placeholders(
    template: Mapping[str, str], environment: Mapping[str, str], field_name: str
) -> dict[str, str]:
    """Resolve ``${VAR}`` placeholders in the values of ``template`` from ``environment``.

    Raises:
        InvalidInstallation: a placeholder names a variable that ``environment`` does not define.
    """

    def substitute(match: re.Match[str]) -> str:
        variable = match[1]
        if variable not in environment:
            raise InvalidInstallation(
                field_name, f"placeholder ${{{variable}}} is not set; define {variable} in the gateway's environment"
            )
        return environment[variable]

    return {key: _PLACEHOLDER.sub(substitute, value) for key, value in template.items()}


@dataclass(frozen=True, slots=True)
class Installation:
    """One upstream MCP server installed by a team, optionally owned by one user of the team.

    ``headers`` and ``env`` keep their ``${VAR}`` placeholders; they are resolved only when a
    connection is made (see :func:`resolve_placeholders`) and never stored resolved.
    """

    installation_id: str
    team_id: str
    slug: str
    transport: Transport
    user_id: str | None = None
    name: str = ""
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout_seconds: float | None = None

    def __post_init__(self) -> None:
        validate_slug(self.slug)
        if not self.team_id:
            raise InvalidInstallation("team_id", "an installation belongs to a team; team_id is empty")
        if self.transport.is_remote:
            _validate_url(self.url)
            if self.command:
                raise InvalidInstallation("command", f"a {self.transport} installation takes a url, not a command")
        elif not self.command:
            raise InvalidInstallation("command", "a stdio installation needs a command to run, e.g. 'npx'")
        if self.timeout_seconds is not None and not 0 < self.timeout_seconds <= 120:
            raise InvalidInstallation("timeout_seconds", "must be greater than 0 and at most 120 seconds")

    @property
    def config_hash(self) -> str:
        """A hash over the fields that change what the server exposes (not enabled, name or owner)."""
        source = {
            "transport": str(self.transport),
            "url": self.url,
            "command": self.command,
            "args": list(self.args),
            "env": dict(sorted(self.env.items())),
            "headers": dict(sorted(self.headers.items())),
        }
        canonical = json.dumps(source, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def resolved_headers(self, environment: Mapping[str, str]) -> dict[str, str]:
        """The headers with placeholders resolved from ``environment``, for one connection."""
        return resolve_placeholders(self.headers, environment, "headers")

    def log_fields(self, operation: str) -> dict[str, str]:
        """Structured log fields naming this installation, for ``logger.*(..., extra=...)``."""
        return {
            "operation": operation,
            "team_id": self.team_id,
            "installation_id": self.installation_id,
            "slug": self.slug,
        }

    def to_dict(self) -> dict[str, Any]:
        """The installation as plain JSON-compatible data (placeholders unresolved)."""
        return {
            "installation_id": self.installation_id,
            "team_id": self.team_id,
            "user_id": self.user_id,
            "slug": self.slug,
            "name": self.name,
            "transport": str(self.transport),
            "url": self.url,
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "headers": dict(self.headers),
            "enabled": self.enabled,
            "timeout_seconds": self.timeout_seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Installation:
        """Rebuild an installation from :meth:`to_dict` output.

        Raises:
            InvalidInstallation: a field is missing or invalid.
        """
        try:
            transport = Transport(data["transport"])
        except ValueError as exc:
            choices = ", ".join(t.value for t in Transport)
            raise InvalidInstallation("transport", f"{data['transport']!r} is not one of {choices}") from exc
        except KeyError as exc:
            raise InvalidInstallation(str(exc.args[0]), "is required") from exc
        timeout = data.get("timeout_seconds")
        return cls(
            installation_id=str(data["installation_id"]),
            team_id=str(data["team_id"]),
            user_id=data.get("user_id") or None,
            slug=str(data["slug"]),
            name=str(data.get("name") or ""),
            transport=transport,
            url=data.get("url"),
            command=data.get("command"),
            args=tuple(str(a) for a in data.get("args") or ()),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            enabled=bool(data.get("enabled", True)),
            timeout_seconds=None if timeout is None else float(timeout),
        )


def _validate_url(url: str | None) -> None:
    if not url:
        raise InvalidInstallation("url", "a remote installation needs the server's http(s) URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInstallation("url", f"{url!r} is not an http(s) URL with a host")
