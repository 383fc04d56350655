"""Real upstream servers for tests: the npm reference servers as subprocesses, plus tiny scripted ones.

Every server listens on a free loopback port, is waited for with a bounded poll on the port (never
a sleep), and is stopped at teardown (subprocesses by killing their whole process group).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from satellite.local.processes import free_port, stop_process_group, wait_for_port

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "EVERYTHING_ENTRY",
    "NODE_MODULES",
    "ScriptedServer",
    "closed_port_url",
    "hanging_server",
    "start_basic_app",
    "start_everything",
    "start_scripted",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO_ROOT / "infra" / "local" / "node_modules"
EVERYTHING_ENTRY = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
BASIC_APP_ENTRY = NODE_MODULES / "@modelcontextprotocol" / "server-basic-vanillajs" / "dist" / "index.js"
STARTUP_TIMEOUT_SECONDS = 20.0


@contextmanager
def _node_server(args: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[None]:
    environment = {**os.environ, "PORT": str(port), **(env or {})}
    process = subprocess.Popen(
        ["node", *args],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_port(port, STARTUP_TIMEOUT_SECONDS, process)
        yield
    finally:
        stop_process_group(process)


@contextmanager
def start_everything(transport: str = "streamableHttp", port: int | None = None) -> Iterator[str]:
    """Run server-everything over ``streamableHttp`` (``/mcp``) or ``sse`` (``/sse``); yield its URL.

    Pass ``port`` to restart a server on the port a previous one used.
    """
    port = port or free_port()
    path = {"streamableHttp": "/mcp", "sse": "/sse"}[transport]
    with _node_server([str(EVERYTHING_ENTRY), transport], port):
        yield f"http://127.0.0.1:{port}{path}"


@contextmanager
def start_basic_app() -> Iterator[str]:
    """Run the MCP Apps example server (``server-basic-vanillajs``) over Streamable HTTP; yield its URL."""
    port = free_port()
    with _node_server([str(BASIC_APP_ENTRY)], port):
        yield f"http://127.0.0.1:{port}/mcp"


def closed_port_url(path: str = "/mcp") -> str:
    """A URL on a loopback port where nothing listens (connections are refused)."""
    return f"http://127.0.0.1:{free_port()}{path}"


@contextmanager
def hanging_server() -> Iterator[str]:
    """A TCP server that accepts connections (kernel backlog) and never answers; yield its URL."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"


@dataclass
class ScriptedServer:
    """A minimal MCP server over Streamable HTTP (JSON responses) answering from a script.

    It sends exactly the JSON it is given, so tests can serve what the SDK's own server refuses
    to (a tool whose ``inputSchema`` lacks ``"type"``). ``tool_pages`` are served one per
    ``tools/list`` page, linked by cursors. ``status`` answers every request with that HTTP
    status instead (e.g. 401). ``headers_seen`` records each request's headers.
    """

    tool_pages: list[list[Any]] = field(default_factory=lambda: [[]])
    capabilities: dict[str, Any] = field(default_factory=lambda: {"tools": {}})
    status: int | None = None
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    methods_seen: list[str] = field(default_factory=list)
    url: str = ""

    def count(self, method: str) -> int:
        """How many requests for ``method`` reached this server."""
        return self.methods_seen.count(method)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.headers_seen.append(headers)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.status is not None:
            await _respond(send, self.status, {"error": "unauthorized"})
            return
        if scope["method"] != "POST":
            await _respond(send, 405, {"error": "POST only"})
            return
        request = json.loads(body)
        self.methods_seen.append(str(request.get("method")))
        if "id" not in request:
            await _respond(send, 202, None)
            return
        await _respond(send, 200, {"jsonrpc": "2.0", "id": request["id"], **self._answer(request)})

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        method = request["method"]
        params = request.get("params") or {}
        if method == "initialize":
            return {
                "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": self.capabilities,
                    "serverInfo": {"name": "scripted", "version": "1.0.0"},
                }
            }
        if method == "tools/list":
            cursor = params.get("cursor")
            index = 0 if cursor is None else int(cursor.removeprefix("page-"))
            result: dict[str, Any] = {"tools": self.tool_pages[index]}
            if index + 1 < len(self.tool_pages):
                result["nextCursor"] = f"page-{index + 1}"
            return {"result": result}
        if method == "tools/call":
            return {"result": {"content": [{"type": "text", "text": json.dumps(params)}]}}
        return {"error": {"code": -32601, "message": f"Method not found: {method}"}}


async def _respond(send: Any, status: int, payload: Any) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


@contextmanager
def start_scripted(server: ScriptedServer) -> Iterator[ScriptedServer]:
    """Serve ``server`` with uvicorn on a free loopback port in a background thread; set its ``url``."""
    port = free_port()
    config = uvicorn.Config(server, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, name=f"scripted-mcp-{port}", daemon=True)
    thread.start()
    try:
        wait_for_port(port, STARTUP_TIMEOUT_SECONDS)
        server.url = f"http://127.0.0.1:{port}/mcp"
        yield server
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
