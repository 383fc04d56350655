"""The HTTP edge: a FastAPI app serving the stateless MCP endpoint at ``POST /mcp`` and a health route.

Each POST runs a fresh stateless, JSON-response ``StreamableHTTPSessionManager`` around one request:
Mangum runs the ASGI lifespan on every Lambda invocation and a manager can ``run()`` only once,
so nothing long-lived hangs off a lifespan. The router and its caches live as long as the process.
"""

from __future__ import annotations

import hmac
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from satellite import __version__
from satellite.api import api_router, status_router
from satellite.mcp_server import build_mcp_server, current_identity

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mcp.server.lowlevel.server import Server
    from starlette.types import Receive, Scope, Send

    from satellite.config import Identity, Settings
    from satellite.installations import InstallationService
    from satellite.router import Router

__all__ = ["create_app"]

VERSION = __version__
STATUS_PAGE = (resources.files("satellite") / "static" / "status.html").read_text(encoding="utf-8")
UNAUTHORIZED = -32001


def create_app(router: Router, installations: InstallationService, settings: Settings) -> FastAPI:
    """Build the gateway app: ``/mcp`` over ``router``, ``/api`` over ``installations``.

    Identities come from ``settings.tokens``; the debug route ``/api/status`` exists only when
    ``settings.status_route`` is on.
    """
    app = FastAPI(title="Satellite MCP gateway", version=VERSION)
    app.state.authenticate = lambda scope: _authenticate(scope, settings.tokens)
    app.state.installations = installations
    app.include_router(api_router)
    if settings.status_route:
        app.include_router(status_router)
    endpoint = _McpEndpoint(build_mcp_server(router, VERSION), settings)
    app.router.routes.append(Route("/mcp", endpoint=endpoint, methods=["POST"]))

    @app.get("/mcp", include_in_schema=False)
    @app.delete("/mcp", include_in_schema=False)
    async def mcp_other_methods() -> JSONResponse:
        return JSONResponse(
            _jsonrpc_error(-32600, "This endpoint is stateless: send JSON-RPC messages with POST; no GET stream."),
            status_code=405,
            headers={"Allow": "POST"},
        )

    @app.get("/", include_in_schema=False)
    async def status_page() -> HTMLResponse:
        # The page holds no data: its script asks for a token and reads /api with it.
        return HTMLResponse(STATUS_PAGE)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "version": VERSION}

    return app


class _McpEndpoint:
    """ASGI endpoint: authenticate, bind the caller's identity, hand the request to the SDK."""

    def __init__(self, server: Server[Any], settings: Settings) -> None:
        self._server = server
        self._tokens = settings.tokens
        self._max_request_bytes = settings.max_request_bytes
        hosts = list(settings.allowed_hosts)
        self._security = TransportSecuritySettings(
            enable_dns_rebinding_protection="*" not in hosts,
            allowed_hosts=hosts,
            allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        identity = _authenticate(scope, self._tokens)
        if identity is None:
            response = JSONResponse(
                _jsonrpc_error(UNAUTHORIZED, "Missing or unknown bearer token: send 'Authorization: Bearer <token>'."),
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="satellite"'},
            )
            await response(scope, receive, send)
            return
        content_type = _header(scope, b"content-type").split(";")[0].strip().lower()
        if content_type != "application/json":
            message = f"Unsupported Content-Type {content_type or '(none)'!r}: send JSON-RPC as application/json."
            await JSONResponse(_jsonrpc_error(-32600, message), status_code=415)(scope, receive, send)
            return
        manager = StreamableHTTPSessionManager(
            self._server,
            json_response=True,
            stateless=True,
            security_settings=self._security,
            max_request_body_size=self._max_request_bytes,
        )
        token = current_identity.set(identity)
        try:
            async with manager.run():
                await manager.handle_request(scope, receive, send)
        finally:
            current_identity.reset(token)


def _authenticate(scope: Scope, tokens: Mapping[str, Identity]) -> Identity | None:
    scheme, _, presented = _header(scope, b"authorization").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return None
    for token, identity in tokens.items():
        if hmac.compare_digest(token.encode(), presented.strip().encode()):
            return identity
    return None


def _header(scope: Scope, name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), "")


def _jsonrpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
