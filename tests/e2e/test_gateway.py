"""The local stack end to end: real upstream servers, the emulator, the gateway over HTTP and a real MCP client."""

from __future__ import annotations

import base64
import json
import subprocess
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from satellite.catalog import Status
from tests.support.upstreams import NODE_MODULES

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from satellite.local.stack import LocalStack

pytestmark = pytest.mark.anyio

GENERATIONS = ["legacy", "auto"]


@asynccontextmanager
async def connect(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            yield client


def payload(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return json.loads(block.text)


@pytest.mark.parametrize("mode", GENERATIONS)
async def test_a_client_sees_four_tools_and_uses_upstreams_through_them(
    gateway_url: str, stack: LocalStack, mode: str
) -> None:
    with anyio.fail_after(60):
        async with connect(gateway_url, stack.token, mode) as client:
            # Given a connected client of either protocol generation
            expected_version = "2025-11-25" if mode == "legacy" else "2026-07-28"
            assert client.session.protocol_version == expected_version
            # Then tools/list has exactly the four meta-tools
            listed = await client.list_tools()
            assert sorted(t.name for t in listed.tools) == [
                "discover_mcp_tools",
                "execute_mcp_tool",
                "list_mcp_resources",
                "read_mcp_resource",
            ]
            # When it discovers "echo"
            found = payload(await client.call_tool("discover_mcp_tools", {"query": "echo", "limit": 5}))
            paths = [hit["tool_path"] for hit in found["tools"]]
            assert paths[0] in ("everything:echo", "everything-sse:echo")
            assert {"everything:echo", "everything-sse:echo"} <= set(paths)
            assert found["tools"][0]["signature"] == "echo(message: string)"
            # And executes it over both remote transports
            for path in ("everything:echo", "everything-sse:echo"):
                result = await client.call_tool("execute_mcp_tool", {"tool_path": path, "arguments": {"message": "hi"}})
                assert not result.is_error
                assert isinstance(result.content[0], types.TextContent)
                assert result.content[0].text == "Echo: hi"
            # And structured content comes back unchanged
            summed = await client.call_tool(
                "execute_mcp_tool",
                {"tool_path": "everything:get-structured-content", "arguments": {"location": "New York"}},
            )
            assert summed.structured_content is not None and "temperature" in summed.structured_content


async def test_resources_are_listed_namespaced_and_read_through_the_origin(gateway_url: str, stack: LocalStack) -> None:
    async with connect(gateway_url, stack.token, "legacy") as client:
        listing = payload(await client.call_tool("list_mcp_resources", {}))
        uris = {r["uri"] for r in listing["resources"]}
        assert "everything|demo://resource/static/document/architecture.md" in uris
        assert "basic-app|ui://get-time/mcp-app.html" in uris
        assert listing["total_templates"] == 4
        # A text resource
        text = await client.call_tool(
            "read_mcp_resource", {"uri": "everything|demo://resource/static/document/architecture.md"}
        )
        assert not text.is_error
        block = text.content[0]
        assert isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents)
        assert "Architecture" in block.resource.text
        # A blob resource, from a template
        blob = await client.call_tool("read_mcp_resource", {"uri": "everything-sse|demo://resource/dynamic/blob/7"})
        block = blob.content[0]
        assert isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.BlobResourceContents)
        assert base64.b64decode(block.resource.blob)
        # And the native resources/read works the same way
        native = await client.read_resource("basic-app|ui://get-time/mcp-app.html")
        first = native.contents[0]
        assert isinstance(first, types.TextResourceContents) and "<html" in first.text.lower()


async def test_mcp_apps_meta_is_rewritten_to_the_namespaced_uri(gateway_url: str, stack: LocalStack) -> None:
    async with connect(gateway_url, stack.token, "legacy") as client:
        found = payload(await client.call_tool("discover_mcp_tools", {"query": "get the current time", "limit": 10}))
        hit = next(h for h in found["tools"] if h["tool_path"] == "basic-app:get-time")
        assert hit["_meta"]["ui"]["resourceUri"] == "basic-app|ui://get-time/mcp-app.html"
        listing = payload(await client.call_tool("list_mcp_resources", {}))
        app = next(r for r in listing["resources"] if r["server"] == "basic-app")
        assert app["mimeType"] == "text/html;profile=mcp-app"


async def test_failed_upstreams_are_recorded_and_the_others_still_served(gateway_url: str, stack: LocalStack) -> None:
    # Given one upstream that was stopped and one that hangs (bounded by its 2 s timeout)
    statuses = {entry.slug: entry.status for entry in (await stack_catalog(stack)).installations}
    assert statuses["stopped"].status is Status.OFFLINE and "refused" in (statuses["stopped"].last_error or "")
    assert statuses["hanging"].status is Status.OFFLINE and statuses["hanging"].failure_kind == "timeout"
    assert "did not answer discovery in time" in (statuses["hanging"].last_error or "")
    assert statuses["later"].status is Status.NEVER
    assert statuses["everything"].status is Status.ONLINE
    # Then calling them fails fast with a clear message, and discovery leaves them out
    async with connect(gateway_url, stack.token, "legacy") as client:
        blocked = await client.call_tool("execute_mcp_tool", {"tool_path": "stopped:echo", "arguments": {}})
        assert blocked.is_error
        assert isinstance(blocked.content[0], types.TextContent)
        assert "'stopped' is offline since" in blocked.content[0].text
        assert "refused" in blocked.content[0].text
        found = payload(await client.call_tool("discover_mcp_tools", {"query": "echo", "limit": 50}))
        assert {hit["server"] for hit in found["tools"]} <= {"everything", "everything-sse", "basic-app"}


async def stack_catalog(stack: LocalStack) -> Any:
    from satellite.aws.catalog_store import DynamoCatalogStore

    store = DynamoCatalogStore(stack.settings.catalog_table, client=stack.dynamodb())
    return store.load_catalog(stack.team)


def test_the_mcp_inspector_cli_lists_the_four_tools(gateway_url: str, stack: LocalStack) -> None:
    # Given the MCP Inspector CLI from npm / When it runs tools/list against the endpoint
    cli = NODE_MODULES / "@modelcontextprotocol" / "inspector-cli" / "build" / "index.js"
    completed = subprocess.run(
        [
            "node",
            str(cli),
            gateway_url,
            "--transport",
            "http",
            "--method",
            "tools/list",
            "--header",
            f"Authorization: Bearer {stack.token}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then it prints the four meta-tools
    assert completed.returncode == 0, completed.stderr
    names = sorted(tool["name"] for tool in json.loads(completed.stdout)["tools"])
    assert names == ["discover_mcp_tools", "execute_mcp_tool", "list_mcp_resources", "read_mcp_resource"]
