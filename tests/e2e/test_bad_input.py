"""Bad input at the HTTP edge never gets a 500 or a hang: each gets a specific JSON-RPC error or isError result."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from satellite.local.stack import LocalStack

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def http(gateway_url: str, stack: LocalStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway_url.removesuffix("/mcp"), timeout=30) as client:
        client.headers.update(
            {**HEADERS, "Authorization": f"Bearer {stack.token}", "MCP-Protocol-Version": "2025-11-25"}
        )
        yield client


def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(http: httpx.Client, tool: str, arguments: Any) -> dict[str, Any]:
    response = http.post("/mcp", json=rpc("tools/call", {"name": tool, "arguments": arguments}))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_malformed_json_is_a_parse_error(http: httpx.Client) -> None:
    response = http.post("/mcp", content=b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_a_wrong_content_type_is_refused_with_415(http: httpx.Client) -> None:
    response = http.post("/mcp", content=json.dumps(rpc("tools/list")), headers={"Content-Type": "text/plain"})
    assert response.status_code == 415
    assert "application/json" in response.json()["error"]["message"]


def test_an_unknown_method_is_method_not_found(http: httpx.Client) -> None:
    response = http.post("/mcp", json=rpc("tools/frobnicate"))
    assert response.json()["error"]["code"] == -32601


def test_an_oversized_body_is_refused_with_413(http: httpx.Client, stack: LocalStack) -> None:
    big = "x" * (stack.settings.max_request_bytes + 1)
    response = http.post("/mcp", json=rpc("tools/call", {"name": "discover_mcp_tools", "arguments": {"query": big}}))
    assert response.status_code == 413


def test_missing_or_wrong_token_is_401_with_a_hint(http: httpx.Client) -> None:
    response = http.post("/mcp", json=rpc("tools/list"), headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert "Authorization: Bearer" in response.json()["error"]["message"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_get_is_405_and_never_a_stream(http: httpx.Client) -> None:
    response = http.get("/mcp")
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"


def test_health(http: httpx.Client) -> None:
    assert http.get("/health").json()["status"] == "ok"


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("execute_mcp_tool", {"tool_path": "no-colon", "arguments": {}}, "use 'server:tool'"),
        ("execute_mcp_tool", {"tool_path": "everything:ecko", "arguments": {}}, "Did you mean: everything:echo"),
        ("execute_mcp_tool", {"tool_path": "evrything:echo", "arguments": {}}, "no server 'evrything'"),
        ("execute_mcp_tool", {"arguments": {}}, "needs 'tool_path'"),
        ("execute_mcp_tool", {"tool_path": "everything:echo", "arguments": "hi"}, "'arguments' must be an object"),
        ("read_mcp_resource", {"uri": "demo://resource/static/document/architecture.md"}, "'server|uri'"),
        ("read_mcp_resource", {}, "needs 'uri'"),
        ("discover_mcp_tools", {}, "needs 'query'"),
        ("discover_mcp_tools", {"query": "echo", "limit": 500}, "from 1 to 50"),
        ("frobnicate", {}, "exactly four tools"),
    ],
)
def test_bad_meta_tool_calls_get_is_error_results_that_say_what_to_do(
    http: httpx.Client, tool: str, arguments: dict[str, Any], message: str
) -> None:
    result = call(http, tool, arguments)
    assert result["isError"] is True
    assert message in result["content"][0]["text"]


def test_bad_arguments_to_an_upstream_tool_come_back_as_the_upstreams_error(http: httpx.Client) -> None:
    result = call(http, "execute_mcp_tool", {"tool_path": "everything:echo", "arguments": {"wrong": 1}})
    assert result["isError"] is True
    assert "message" in result["content"][0]["text"]


def test_an_empty_query_gets_guidance(http: httpx.Client) -> None:
    result = call(http, "discover_mcp_tools", {"query": "  "})
    body = json.loads(result["content"][0]["text"])
    assert body["tools"] == [] and "Describe what you want to do" in body["guidance"]
