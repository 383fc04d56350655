from __future__ import annotations

import pytest

from satellite.errors import InvalidInstallation
from satellite.installation import Installation, Transport, derive_slug, resolve_placeholders, validate_slug


def remote(**overrides: object) -> Installation:
    fields: dict[str, object] = {
        "installation_id": "i1",
        "team_id": "t1",
        "slug": "github",
        "transport": Transport.STREAMABLE_HTTP,
        "url": "https://mcp.example.com/mcp",
    }
    fields.update(overrides)
    return Installation(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("filesystem-john-abc123", "filesystem"),
        ("google-maps-john-abc123", "google-maps"),
        ("github", "github"),
        ("google-maps", "google-maps"),
        ("My Server!", "my-server"),
        ("context7", "context7"),
    ],
)
def test_derive_slug_drops_owner_and_id_but_keeps_multiword_slugs(name: str, slug: str) -> None:
    # Given an installation name / When a slug is derived / Then the owner-id tail is gone, hyphens kept
    assert derive_slug(name) == slug


@pytest.mark.parametrize("bad", ["", "GitHub", "git:hub", "a|b", "-lead", "x" * 64, "spa ce"])
def test_invalid_slugs_are_rejected_with_the_rule(bad: str) -> None:
    with pytest.raises(InvalidInstallation) as info:
        validate_slug(bad)
    assert info.value.field == "slug"
    assert "lowercase letters, digits" in info.value.message


def test_config_hash_changes_with_what_the_server_exposes_only() -> None:
    # Given an installation
    base = remote()
    # When fields that change the exposed tools change, the hash moves; when others change, it does not
    assert remote(url="https://other.example.com/mcp").config_hash != base.config_hash
    assert remote(headers={"Authorization": "Bearer ${TOKEN}"}).config_hash != base.config_hash
    assert remote(enabled=False).config_hash == base.config_hash
    assert remote(name="renamed", user_id="u1").config_hash == base.config_hash
    assert len(base.config_hash) == 32


def test_headers_keep_placeholders_and_resolve_only_on_request() -> None:
    # Given headers with a placeholder
    installation = remote(headers={"Authorization": "Bearer ${GH_TOKEN}", "X-Static": "1"})
    # When resolved against an environment
    resolved = installation.resolved_headers({"GH_TOKEN": "s3cret"})
    # Then the installation still holds the placeholder and the resolved copy holds the value
    assert installation.headers["Authorization"] == "Bearer ${GH_TOKEN}"
    assert installation.to_dict()["headers"]["Authorization"] == "Bearer ${GH_TOKEN}"
    assert resolved == {"Authorization": "Bearer s3cret", "X-Static": "1"}


def test_a_missing_placeholder_variable_is_a_clear_error() -> None:
    with pytest.raises(InvalidInstallation, match=r"\$\{MISSING\} is not set; define MISSING"):
        resolve_placeholders({"X": "${MISSING}"}, {}, "headers")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"url": "ftp://x.example.com"}, "url"),
        ({"url": None}, "url"),
        ({"transport": Transport.STDIO, "url": None}, "command"),
        ({"timeout_seconds": 121.0}, "timeout_seconds"),
        ({"team_id": ""}, "team_id"),
    ],
)
def test_invalid_installations_name_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInstallation) as info:
        remote(**overrides)
    assert info.value.field == field


def test_round_trip_through_dict_keeps_every_field() -> None:
    installation = Installation(
        installation_id="i2",
        team_id="t1",
        user_id="u9",
        slug="fs",
        name="fs-u9-abc1",
        transport=Transport.STDIO,
        command="npx",
        args=("-y", "@modelcontextprotocol/server-filesystem", "/data"),
        env={"A": "${B}"},
        enabled=False,
        timeout_seconds=12.5,
    )
    assert Installation.from_dict(installation.to_dict()) == installation


def test_unknown_transport_in_data_lists_the_choices() -> None:
    data = remote().to_dict() | {"transport": "websocket"}
    with pytest.raises(InvalidInstallation, match="streamable_http, sse, stdio"):
        Installation.from_dict(data)
