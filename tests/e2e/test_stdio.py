"""stdio servers end to end: the local stack with a worker process, the gateway over HTTP and a real MCP client.

The stack runs only stdio servers (everything over stdio, memory, time), so it starts in a few seconds; calls go
gateway -> worker request queue -> worker -> server -> reply queue -> gateway on the emulator.
"""

from __future__ import annotations

import json
import secrets
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from satellite.local.stack import REPO_ROOT, LocalStack
from tests.support.upstreams import EVERYTHING_ENTRY, NODE_MODULES
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.anyio

MEMORY_ENTRY = NODE_MODULES / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
TIME_COMMAND = REPO_ROOT / ".tools" / "mcp-servers" / "bin" / "mcp-server-time"


@pytest.fixture(scope="module")
def stdio_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    folder = tmp_path_factory.mktemp("stdio-stack")
    config = {
        "team": "e2e-stdio",
        "mcpServers": {
            "everything-stdio": {"command": "node", "args": [str(EVERYTHING_ENTRY), "stdio"]},
            "memory": {"command": "node", "args": [str(MEMORY_ENTRY)], "env": {"MEMORY_FILE_PATH": "./memory.jsonl"}},
            "time": {"command": str(TIME_COMMAND), "args": ["--local-timezone", "UTC"]},
        },
    }
    (folder / "servers.json").write_text(json.dumps(config))
    with LocalStack(folder / "servers.json", token=secrets.token_urlsafe(16), worker=True) as local:
        yield local


@pytest.fixture(scope="module")
def stdio_url(stdio_stack: LocalStack) -> Iterator[str]:
    with stdio_stack.serve() as url:
        yield url


@pytest.fixture(scope="module")
def api(stdio_url: str, stdio_stack: LocalStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stdio_url.removesuffix("/mcp"), timeout=30) as client:
        client.headers["Authorization"] = f"Bearer {stdio_stack.token}"
        yield client


@asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:  # type: ignore[arg-type]
            yield client


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def payload(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    return json.loads(text_of(result))


async def execute(client: Client, tool_path: str, arguments: dict[str, Any]) -> types.CallToolResult:
    return await client.call_tool("execute_mcp_tool", {"tool_path": tool_path, "arguments": arguments})


def test_every_stdio_server_is_discovered_by_the_worker_at_start(stdio_stack: LocalStack) -> None:
    # Given the stack started with a worker
    # Then each stdio server was discovered through the worker and is served
    summary = {entry.slug: (str(entry.status.status), len(entry.tools)) for entry in stdio_stack.stdio}
    assert summary == {"everything-stdio": ("online", 13), "memory": ("online", 9), "time": ("online", 2)}


async def test_stdio_tools_are_found_and_run_end_to_end(stdio_url: str, stdio_stack: LocalStack) -> None:
    with anyio.fail_after(60):
        async with connect(stdio_url, stdio_stack.token) as client:
            # When a client searches the catalog
            found = payload(await client.call_tool("discover_mcp_tools", {"query": "echo a message", "limit": 5}))
            hit = next(h for h in found["tools"] if h["tool_path"] == "everything-stdio:echo")
            # Then stdio tools are found like any other
            assert hit["transport"] == "stdio"

            # And they run through the queues and the worker
            echoed = await execute(client, "everything-stdio:echo", {"message": "over stdio"})
            assert not echoed.is_error and text_of(echoed) == "Echo: over stdio"
            now = payload(await execute(client, "time:get_current_time", {"timezone": "Asia/Tokyo"}))
            assert now["timezone"] == "Asia/Tokyo"

            # And a stateful server keeps what a call created for the next call
            created = await execute(
                client,
                "memory:create_entities",
                {"entities": [{"name": "satellite", "entityType": "project", "observations": ["routes stdio"]}]},
            )
            assert not created.is_error, created.content
            graph = await execute(client, "memory:open_nodes", {"names": ["satellite"]})
            assert not graph.is_error and "routes stdio" in text_of(graph)


async def test_stdio_resources_are_read_through_the_worker(stdio_url: str, stdio_stack: LocalStack) -> None:
    with anyio.fail_after(60):
        async with connect(stdio_url, stdio_stack.token) as client:
            # Given a cached resource of the stdio everything server
            listing = payload(await client.call_tool("list_mcp_resources", {}))
            uri = next(r["uri"] for r in listing["resources"] if r["server"] == "everything-stdio")
            # When it is read
            read = await client.call_tool("read_mcp_resource", {"uri": uri})
            # Then its contents come back from the server
            assert not read.is_error, read.content
            assert read.content


async def test_bad_calls_to_stdio_servers_get_clear_errors(stdio_url: str, stdio_stack: LocalStack) -> None:
    with anyio.fail_after(60):
        async with connect(stdio_url, stdio_stack.token) as client:
            # When a tool the server does not have is called
            unknown = await execute(client, "everything-stdio:no_such_tool", {})
            # Then the error names the server and suggests the closest tools
            assert unknown.is_error and "has no tool 'no_such_tool'" in text_of(unknown)

            # When a tool gets arguments that break its schema
            bad = await execute(client, "everything-stdio:echo", {"message": {"not": "a string"}})
            # Then the call fails with the server's own complaint, not a hang or a crash
            assert bad.is_error
            assert "message" in text_of(bad).lower()


async def test_a_missing_command_is_reported_with_a_suggestion(
    api: httpx.Client, stdio_url: str, stdio_stack: LocalStack
) -> None:
    # Given a stdio installation added through the API whose command does not exist
    response = api.post(
        "/api/installations",
        json={"name": "ghost", "transport": "stdio", "command": "nodee", "args": [str(EVERYTHING_ENTRY), "stdio"]},
    )
    assert response.status_code == 202, response.text
    installation_id = response.json()["installation_id"]

    # When the worker tries to start it (the API sent it a discover request)
    def failed() -> dict[str, Any] | None:
        status: dict[str, Any] = api.get(f"/api/installations/{installation_id}").json()["status"]
        return status if status["discovery"] == "failed" else None

    status = eventually(failed, "the worker records the failed start", timeout=30)

    # Then its status says the command was not found and suggests the likely one
    assert status["status"] == "error" and status["failure_kind"] == "command_not_found"
    assert "command not found" in (status["last_error"] or "")
    assert "node" in (status["suggestion"] or "")
    # And calls to it fail fast with that status
    with anyio.fail_after(30):
        async with connect(stdio_url, stdio_stack.token) as client:
            blocked = await execute(client, "ghost:echo", {"message": "x"})
    assert blocked.is_error and "error" in text_of(blocked)
    # And it can be removed (the worker is told to uninstall it)
    assert api.delete(f"/api/installations/{installation_id}").status_code == 204
    assert api.get(f"/api/installations/{installation_id}").status_code == 404
