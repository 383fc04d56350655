"""The installations API end to end: the local stack with its discovery consumer, real upstream servers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from openapi_spec_validator import validate

from tests.support.upstreams import ScriptedServer, start_everything, start_scripted
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

    from satellite.local.stack import LocalStack


@pytest.fixture(scope="module")
def api(gateway_url: str, stack: LocalStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway_url.removesuffix("/mcp"), timeout=30) as client:
        client.headers["Authorization"] = f"Bearer {stack.token}"
        yield client


def tool_paths(api: httpx.Client) -> set[str]:
    return {tool["tool_path"] for tool in api.get("/api/catalog").json()}


def test_add_returns_at_once_and_tools_become_discoverable_within_seconds(api: httpx.Client) -> None:
    with start_everything() as url:
        # When an installation is added
        started = time.monotonic()
        response = api.post(
            "/api/installations", json={"name": "extra-everything", "transport": "streamable_http", "url": url}
        )
        elapsed = time.monotonic() - started
        # Then the POST answers at once with status discovering
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["slug"] == "extra-everything" and body["status"]["discovery"] == "discovering"
        assert elapsed < 2
        # And its tools appear in the catalog within seconds, discovered in the background
        eventually(lambda: "extra-everything:echo" in tool_paths(api), "extra-everything:echo in the catalog")
        installation = api.get(f"/api/installations/{body['installation_id']}").json()
        assert installation["status"]["status"] == "online" and installation["tools"] == 13
        api.delete(f"/api/installations/{body['installation_id']}")


def test_an_update_that_keeps_the_hash_makes_no_upstream_call_and_remove_clears_everything(api: httpx.Client) -> None:
    scripted = ScriptedServer(tool_pages=[[{"name": "ping", "description": "Ping", "inputSchema": {"type": "object"}}]])
    with start_scripted(scripted) as server:
        added = api.post(
            "/api/installations", json={"name": "scripted", "transport": "streamable_http", "url": server.url}
        )
        installation_id = added.json()["installation_id"]
        eventually(lambda: "scripted:ping" in tool_paths(api), "scripted:ping in the catalog")
        calls = server.count("tools/list")
        # When only the name and enabled flag change (not the hash)
        update = {"name": "scripted renamed", "slug": "scripted", "transport": "streamable_http", "url": server.url}
        assert api.put(f"/api/installations/{installation_id}", json=update).status_code == 200
        # Then no discovery reaches the upstream
        assert server.count("tools/list") == calls
        # When it is removed, its tools are gone
        assert api.delete(f"/api/installations/{installation_id}").status_code == 204
        assert "scripted:ping" not in tool_paths(api)
        assert api.get(f"/api/installations/{installation_id}").status_code == 404


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"name": "x", "slug": "Bad Slug", "transport": "sse", "url": "http://a/sse"}, "slug", 422),
        ({"name": "x", "transport": "websocket", "url": "http://a"}, "transport", 422),
        ({"name": "x", "transport": "streamable_http", "url": "ftp://a/mcp"}, "url", 422),
        ({"name": "x", "transport": "stdio"}, "command", 422),
        ({"name": "everything", "transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}, "slug", 409),
    ],
)
def test_bad_input_gets_a_field_level_4xx(api: httpx.Client, body: dict[str, Any], field: str, code: int) -> None:
    response = api.post("/api/installations", json=body)
    assert response.status_code == code, response.text
    detail = response.json()["detail"]
    assert any(field in error["loc"] for error in detail), detail


def test_the_api_needs_a_token(gateway_url: str) -> None:
    response = httpx.get(gateway_url.removesuffix("/mcp") + "/api/installations")
    assert response.status_code == 401


def test_the_openapi_schema_is_published_and_valid(api: httpx.Client) -> None:
    schema = api.get("/openapi.json").json()
    validate(schema)
    assert "/api/installations" in schema["paths"]


def test_the_debug_status_groups_tools_and_reports_discovery_and_stdio_processes(api: httpx.Client) -> None:
    status = api.get("/api/status").json()
    assert "everything:echo" in status["tools_by_transport"]["streamable_http"]
    assert "everything-sse:echo" in status["tools_by_transport"]["sse"]
    assert status["servers"]["everything"]["status"]["status"] == "online"
    assert status["discovery"]["success"] >= 3 and status["discovery"]["failed"] + status["discovery"]["timeout"] >= 2
    assert status["stdio_processes"]["later"]["status"] == "never"
