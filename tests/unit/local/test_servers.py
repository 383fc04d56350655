from __future__ import annotations

from pathlib import Path

import pytest

from satellite.errors import InvalidInstallation
from satellite.installation import Transport
from satellite.local.servers import load_servers, parse_servers

EXAMPLE = Path(__file__).resolve().parents[3] / "infra" / "local" / "servers.json"


def test_the_example_config_parses_into_remote_servers_with_start_commands() -> None:
    team, servers = load_servers(EXAMPLE)
    by_slug = {s.installation.slug: s for s in servers}
    assert team == "dev"
    assert by_slug["everything"].installation.transport is Transport.STREAMABLE_HTTP
    assert by_slug["everything-sse"].installation.transport is Transport.SSE
    assert by_slug["basic-app"].start is not None
    assert all(s.start is not None and s.start.command == "node" for s in servers if s.installation.transport.is_remote)


def test_client_style_entries_and_stdio_entries_are_accepted() -> None:
    # Given the mcpServers JSON a client uses, with Claude Code's "type" and a stdio entry
    data = {
        "mcpServers": {
            "github-john-abc123": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"A": "${T}"}},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        }
    }
    # When parsed
    team, servers = parse_servers(data)
    github, legacy, time = (s.installation for s in servers)
    # Then slugs are derived, transports mapped and placeholders kept
    assert team == "dev"
    assert (github.slug, github.transport, github.headers["A"]) == ("github", Transport.STREAMABLE_HTTP, "${T}")
    assert legacy.transport is Transport.SSE
    assert (time.transport, time.command, time.args, time.env) == (
        Transport.STDIO,
        "uvx",
        ("mcp-server-time",),
        {"TZ": "UTC"},
    )
    # And installation ids are stable across runs
    assert parse_servers(data)[1][0].installation.installation_id == github.installation_id


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"servers": {}}, "mcpServers"),
        ({"mcpServers": {"x": {"type": "websocket", "url": "http://a"}}}, "mcpServers.x.transport"),
        ({"mcpServers": {"x": {"url": "file:///etc/passwd"}}}, "mcpServers.x.url"),
        ({"mcpServers": {"x": {"type": "stdio"}}}, "mcpServers.x.command"),
        ({"mcpServers": {"x": {"url": "http://a", "slug": "Bad Slug"}}}, "mcpServers.x.slug"),
        ({"mcpServers": {"x": {"url": "http://a", "start": {"args": []}}}}, "mcpServers.x.start"),
    ],
)
def test_invalid_entries_name_the_entry_and_field(data: object, field: str) -> None:
    with pytest.raises(InvalidInstallation) as info:
        parse_servers(data)
    assert info.value.field == field


def test_relative_stdio_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    # Given a stdio entry with a relative command, relative and plain args, and a relative env value
    data = {
        "mcpServers": {
            "git": {
                "command": "../tools/bin/mcp-server-git",
                "args": ["--repository", "./state/repo", "plain", "/abs/path"],
                "env": {"MEMORY_FILE_PATH": "./state/memory.jsonl", "TZ": "UTC"},
            },
            "npx": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
        }
    }
    base = tmp_path / "config"

    # When parsed with the config file's folder as the base
    git, npx = (s.installation for s in parse_servers(data, base=base)[1])

    # Then relative paths become absolute, and bare command names, flags and absolute paths stay as they are
    assert git.command == str(tmp_path / "tools" / "bin" / "mcp-server-git")
    assert git.args == ("--repository", str(base / "state" / "repo"), "plain", "/abs/path")
    assert git.env == {"MEMORY_FILE_PATH": str(base / "state" / "memory.jsonl"), "TZ": "UTC"}
    assert (npx.command, npx.args) == ("npx", ("-y", "@modelcontextprotocol/server-memory"))


def test_the_example_config_runs_its_stdio_servers_from_absolute_paths() -> None:
    # Given the example config of make dev
    _, servers = load_servers(EXAMPLE)
    stdio = {s.installation.slug: s.installation for s in servers if s.installation.transport is Transport.STDIO}

    # Then it has the five stdio servers, each naming files by absolute paths inside the repository
    assert set(stdio) == {"everything-stdio", "time", "git", "filesystem", "memory"}
    root = EXAMPLE.parents[2]
    assert stdio["time"].command == str(root / ".tools" / "mcp-servers" / "bin" / "mcp-server-time")
    assert stdio["git"].args == ("--repository", str(root / "infra" / "local" / ".state" / "scratch-repo"))
    assert stdio["memory"].env["MEMORY_FILE_PATH"] == str(root / "infra" / "local" / ".state" / "memory.jsonl")
    assert all(a.startswith("/") for a in stdio["filesystem"].args)
