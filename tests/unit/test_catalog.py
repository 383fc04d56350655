from __future__ import annotations

from datetime import UTC, datetime

import pytest

from satellite.catalog import (
    CachedTool,
    InstallationCatalog,
    InstallationStatus,
    Status,
    TeamCatalog,
    format_resource_uri,
    format_tool_path,
    parse_resource_uri,
    parse_tool_path,
    rewrite_ui_meta,
)
from satellite.errors import InvalidInstallation
from satellite.installation import Installation, Transport

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def test_tool_paths_split_on_the_first_colon_only() -> None:
    assert parse_tool_path("github:create_issue") == ("github", "create_issue")
    assert parse_tool_path("google-maps:geo:code") == ("google-maps", "geo:code")
    assert format_tool_path("google-maps", "geo:code") == "google-maps:geo:code"


@pytest.mark.parametrize("bad", ["github", ":tool", "github:", ""])
def test_bad_tool_paths_say_what_a_path_looks_like(bad: str) -> None:
    with pytest.raises(InvalidInstallation, match="use 'server:tool'"):
        parse_tool_path(bad)


def test_resource_uris_keep_their_colons() -> None:
    namespaced = format_resource_uri("excalidraw", "ui://excalidraw/mcp-app.html")
    assert namespaced == "excalidraw|ui://excalidraw/mcp-app.html"
    assert parse_resource_uri(namespaced) == ("excalidraw", "ui://excalidraw/mcp-app.html")
    assert parse_resource_uri("s|a|b") == ("s", "a|b")
    with pytest.raises(InvalidInstallation, match="'server\\|uri'"):
        parse_resource_uri("file:///x")


def test_ui_meta_is_rewritten_in_both_shapes_and_the_rest_kept() -> None:
    meta = {"ui": {"resourceUri": "ui://get-time/mcp-app.html", "csp": "x"}, "ui/resourceUri": "ui://a", "k": 1}
    rewritten = rewrite_ui_meta(meta, "basic-app")
    assert rewritten == {
        "ui": {"resourceUri": "basic-app|ui://get-time/mcp-app.html", "csp": "x"},
        "ui/resourceUri": "basic-app|ui://a",
        "k": 1,
    }
    assert meta["ui"]["resourceUri"] == "ui://get-time/mcp-app.html"  # type: ignore[index]
    assert rewrite_ui_meta(None, "x") is None


def entry(slug: str, user: str | None, status: Status = Status.ONLINE, enabled: bool = True) -> InstallationCatalog:
    installation = Installation(
        installation_id=f"{slug}-{user}",
        team_id="t1",
        user_id=user,
        slug=slug,
        transport=Transport.SSE,
        url="http://127.0.0.1:1/sse",
        enabled=enabled,
    )
    tool = CachedTool({"name": "t", "inputSchema": {"type": "object"}}, NOW, Transport.SSE)
    return InstallationCatalog(installation, InstallationStatus(status, NOW), tools=(tool,))


def test_a_callers_own_instance_shadows_the_shared_one_and_others_are_hidden() -> None:
    # Given a shared github, alice's own github, and bob's own memory
    team = TeamCatalog("t1", 3, (entry("github", None), entry("github", "alice"), entry("memory", "bob")))
    # When alice and bob look
    alice = team.visible_to("alice")
    bob = team.visible_to("bob")
    anonymous = team.visible_to(None)
    # Then alice sees only her github; bob sees the shared github and his memory
    assert [(e.slug, e.installation.user_id) for e in alice.installations] == [("github", "alice")]
    assert sorted((e.slug, e.installation.user_id or "") for e in bob.installations) == [
        ("github", ""),
        ("memory", "bob"),
    ]
    assert [e.slug for e in anonymous.installations] == ["github"]


def test_only_enabled_online_or_dormant_installations_serve() -> None:
    team = TeamCatalog(
        "t1",
        1,
        (
            entry("a", None),
            entry("b", None, Status.DORMANT),
            entry("c", None, Status.OFFLINE),
            entry("d", None, Status.ERROR),
            entry("e", None, enabled=False),
            entry("f", None, Status.NEVER),
        ),
    )
    assert [e.slug for e in team.serving()] == ["a", "b"]
