"""Connections to upstream MCP servers with the ``mcp`` SDK client, and failure classification.

:func:`open_session` connects over Streamable HTTP or legacy HTTP+SSE, runs the initialize
handshake (upstreams are handshake-era servers, so no ``server/discover`` probe) and yields an
:class:`UpstreamSession`.

Raw results. ``ClientSession.send_request`` validates every result against the negotiated
protocol's wire model before returning it, even with a lenient result type, so a single tool whose
``inputSchema`` lacks ``"type"`` fails a whole ``tools/list`` page. The SDK's public seam below the
typed layer is the :class:`~mcp.shared.dispatcher.Dispatcher`: ``ClientSession`` accepts a
pre-built ``dispatcher=``, and ``Dispatcher.send_raw_request`` returns the raw result dict. We
build the ``JSONRPCDispatcher`` ourselves, hand it to the session (which still owns the handshake
and request-id correlation), and keep it for raw requests. No private attribute is touched.

Failure classification. The SDK surfaces failures in several shapes: ``httpx2`` errors inside
(nested) exception groups from the transport's task group, ``MCPError`` with a synthesised code
(an HTTP 401 on Streamable HTTP arrives as ``-32603 Server returned an error response``), or
``TimeoutError`` from our own deadline. HTTP 401/403 are made visible by an ``httpx2`` response
hook that raises ``HTTPStatusError`` for them, and :func:`classify_failure` walks the exception
tree to one :class:`~satellite.errors.UpstreamError` with a message saying what failed and what
to do.

stdio slots in later as another branch of :func:`_transport_streams`: every transport yields the
same ``(read_stream, write_stream)`` pair the dispatcher runs on.
"""

from __future__ import annotations

import logging
import math
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    Implementation,
    ServerCapabilities,
)
from pydantic import ValidationError

from satellite.errors import FailureKind, InvalidInstallation, UpstreamError
from satellite.installation import Installation, Transport

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from mcp.client._transport import ReadStream, WriteStream
    from mcp.shared.message import SessionMessage

__all__ = ["CLIENT_INFO", "UpstreamSession", "classify_failure", "open_session"]

logger = logging.getLogger(__name__)

CLIENT_INFO = Implementation(name="satellite-gateway", version="0.1.0")
_AUTH_STATUSES = frozenset({401, 403})
# What the SDK's Streamable HTTP transport reports for a non-2xx answer that carries no JSON-RPC error.
_SDK_HTTP_ERROR_MESSAGE = "Server returned an error response"
# Exceptions the SDK and httpx2 raise for a failed exchange; anything else is a bug and propagates.
_UPSTREAM_FAILURES = (httpx2.HTTPError, MCPError, ValidationError, TimeoutError, anyio.BrokenResourceError)


@dataclass(frozen=True, slots=True)
class UpstreamSession:
    """An initialized session with one upstream server.

    ``session`` is the SDK's ``ClientSession`` (typed API, server capabilities); :meth:`request`
    sends a request and returns the server's result as raw JSON, unvalidated and unchanged.
    """

    installation: Installation
    session: ClientSession
    dispatcher: JSONRPCDispatcher
    timeout: float

    @property
    def capabilities(self) -> ServerCapabilities:
        return self.session.server_capabilities or ServerCapabilities()

    @property
    def protocol_version(self) -> str:
        return self.session.protocol_version or ""

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send ``method`` and return the raw result dict exactly as the server sent it.

        Raises:
            UpstreamError: the server answered with a JSON-RPC error (``protocol``), did not
                answer within ``timeout`` (``timeout``), or the connection broke (``unreachable``).
        """
        try:
            return await self._send(method, params, timeout)
        except _UPSTREAM_FAILURES as exc:
            raise classify_failure(exc, self.installation, method, established=True) from exc

    async def request_if_supported(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any] | None:
        """Like :meth:`request`, but ``None`` when the server answers "method not found".

        Raises:
            UpstreamError: as :meth:`request`, for any other failure.
        """
        try:
            return await self._send(method, params, timeout)
        except MCPError as exc:
            if exc.code == METHOD_NOT_FOUND:
                return None
            raise classify_failure(exc, self.installation, method, established=True) from exc
        except _UPSTREAM_FAILURES as exc:
            raise classify_failure(exc, self.installation, method, established=True) from exc

    async def _send(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        # The session stamps this header on its own requests; raw requests bypass its stamp.
        headers = {MCP_PROTOCOL_VERSION_HEADER: self.protocol_version}
        return await self.dispatcher.send_raw_request(
            method, params, {"timeout": timeout or self.timeout, "headers": headers}
        )


@asynccontextmanager
async def open_session(
    installation: Installation,
    environment: Mapping[str, str],
    *,
    timeout: float,
    connect_timeout: float,
    stream_idle_timeout: float = 300.0,
) -> AsyncIterator[UpstreamSession]:
    """Connect to ``installation``'s upstream server and run the initialize handshake.

    ``timeout`` bounds connecting plus the handshake, every single HTTP read, and each
    :meth:`UpstreamSession.request` that sets no timeout of its own; ``connect_timeout`` bounds
    the TCP connect. ``stream_idle_timeout`` is how long an SSE event stream may stay silent
    before it counts as dead (kept long so a pooled session survives idle periods).

    Headers are resolved from ``environment`` (``${VAR}`` placeholders) for this connection only.

    Raises:
        UpstreamError: connecting, the handshake, or the transport failed, classified by kind.
            A placeholder naming an undefined variable is reported as ``auth`` (the headers are
            almost always credentials) with the variable's name.
        InvalidInstallation: the installation is not a remote one.
    """
    try:
        headers = installation.resolved_headers(environment)
    except InvalidInstallation as exc:
        raise UpstreamError(FailureKind.AUTH, f"{installation.slug}: {exc}") from exc
    deadline = anyio.CancelScope(deadline=anyio.current_time() + timeout)
    try:
        with deadline:
            async with AsyncExitStack() as stack:
                read_stream, write_stream = await _transport_streams(
                    stack, installation, headers, timeout, connect_timeout, stream_idle_timeout
                )
                dispatcher = JSONRPCDispatcher(read_stream, write_stream)
                session = await stack.enter_async_context(ClientSession(dispatcher=dispatcher, client_info=CLIENT_INFO))
                try:
                    await session.initialize()
                except RuntimeError as exc:
                    # initialize() raises RuntimeError for a protocol version the SDK does not speak.
                    raise UpstreamError(
                        FailureKind.PROTOCOL,
                        f"{installation.slug}: upstream {installation.url} failed the handshake: {exc}",
                    ) from exc
                # The deadline bounds opening only; each request carries its own timeout from here.
                deadline.deadline = math.inf
                yield UpstreamSession(installation, session, dispatcher, timeout)
    except (*_UPSTREAM_FAILURES, BaseExceptionGroup) as exc:
        raise classify_failure(exc, installation, "initialize") from exc
    if deadline.cancelled_caught:
        raise classify_failure(TimeoutError(), installation, "initialize")


async def _transport_streams(
    stack: AsyncExitStack,
    installation: Installation,
    headers: dict[str, str],
    timeout: float,
    connect_timeout: float,
    stream_idle_timeout: float,
) -> tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]:
    url = installation.url or ""
    hooks = {"response": [_raise_for_auth_failure]}
    if installation.transport is Transport.STREAMABLE_HTTP:
        # streamable_http_client takes no headers: the HTTP client carries them.
        client = httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(timeout, connect=connect_timeout), event_hooks=hooks
        )
        await stack.enter_async_context(client)
        return await stack.enter_async_context(streamable_http_client(url, http_client=client))
    if installation.transport is Transport.SSE:
        timeout_seconds = timeout

        def client_factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            # The event stream idles between requests, so its read timeout is the idle bound.
            limits = httpx2.Timeout(timeout_seconds, connect=connect_timeout, read=stream_idle_timeout)
            return httpx2.AsyncClient(headers=headers, auth=auth, timeout=limits, event_hooks=hooks)

        return await stack.enter_async_context(
            sse_client(
                url,
                headers=headers,
                timeout=timeout,
                sse_read_timeout=stream_idle_timeout,
                httpx_client_factory=client_factory,
            )
        )
    raise InvalidInstallation("transport", f"{installation.slug}: {installation.transport} is not a remote transport")


async def _raise_for_auth_failure(response: httpx2.Response) -> None:
    # Streamable HTTP turns every non-2xx answer into a generic JSON-RPC error and loses the status;
    # raising here keeps 401/403 recognisable as an authentication failure.
    if response.status_code in _AUTH_STATUSES:
        response.raise_for_status()


def classify_failure(
    exc: BaseException, installation: Installation, operation: str, *, established: bool = False
) -> UpstreamError:
    """Turn whatever the SDK raised (possibly nested exception groups) into one ``UpstreamError``.

    When several failures are grouped, the most telling one wins: an existing ``UpstreamError``,
    then auth, unreachable, timeout, and protocol. On an ``established`` session, an HTTP error
    the server sent without any MCP answer means the server no longer knows the session
    (restarted, expired; servers answer 400 or 404), which is ``unreachable``: reconnecting helps.

    Raises:
        BaseException: ``exc`` itself when it holds no upstream failure (a bug, not an upstream).
    """
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, UpstreamError):
            return leaf
    classified = [
        c for c in (_classify_leaf(leaf, installation, operation, established) for leaf in leaves) if c is not None
    ]
    if not classified:
        raise exc
    order = (FailureKind.AUTH, FailureKind.UNREACHABLE, FailureKind.TIMEOUT, FailureKind.PROTOCOL)
    return min(classified, key=lambda error: order.index(error.kind))


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _classify_leaf(
    exc: BaseException, installation: Installation, operation: str, established: bool
) -> UpstreamError | None:
    where = f"{installation.slug}: upstream {installation.url}"
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        if status in _AUTH_STATUSES:
            return UpstreamError(
                FailureKind.AUTH,
                f"{where} rejected the credentials with HTTP {status} "
                "(check the installation's headers, e.g. the Authorization token)",
            )
        return UpstreamError(
            FailureKind.PROTOCOL, f"{where} answered HTTP {status} to {operation} (is the URL an MCP endpoint?)"
        )
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return UpstreamError(
            FailureKind.TIMEOUT, f"{where} did not answer {operation} in time (is the server overloaded or hanging?)"
        )
    if isinstance(exc, httpx2.ConnectError):
        if _is_name_resolution_failure(exc):
            return UpstreamError(
                FailureKind.UNREACHABLE, f"{where}: the host name does not resolve (check the URL for typos)"
            )
        return UpstreamError(FailureKind.UNREACHABLE, f"{where} refused the connection (is the server running?)")
    if isinstance(exc, httpx2.NetworkError | httpx2.ProxyError | anyio.BrokenResourceError):
        return UpstreamError(
            FailureKind.UNREACHABLE, f"{where} dropped the connection during {operation} (is the server restarting?)"
        )
    if isinstance(exc, httpx2.HTTPError):
        return UpstreamError(
            FailureKind.PROTOCOL, f"{where} broke the HTTP/SSE protocol during {operation}: {exc or type(exc).__name__}"
        )
    if isinstance(exc, MCPError):
        return _classify_mcp_error(exc, where, operation, established)
    if isinstance(exc, ValidationError):
        return UpstreamError(
            FailureKind.PROTOCOL, f"{where} sent an invalid {operation} result ({exc.error_count()} validation errors)"
        )
    return None


def _classify_mcp_error(exc: MCPError, where: str, operation: str, established: bool) -> UpstreamError:
    if exc.code == REQUEST_TIMEOUT:
        return UpstreamError(
            FailureKind.TIMEOUT, f"{where} did not answer {operation} in time (is the server overloaded or hanging?)"
        )
    if exc.code == CONNECTION_CLOSED or (exc.code == INVALID_REQUEST and exc.message == "Session terminated"):
        return UpstreamError(
            FailureKind.UNREACHABLE, f"{where} closed the session during {operation} (was the server restarted?)"
        )
    if established and exc.code == INTERNAL_ERROR and exc.message == _SDK_HTTP_ERROR_MESSAGE:
        return UpstreamError(
            FailureKind.UNREACHABLE,
            f"{where} rejected the session during {operation} with an HTTP error (was the server restarted?)",
        )
    return UpstreamError(FailureKind.PROTOCOL, f"{where} answered {operation} with MCP error {exc.code}: {exc.message}")


def _is_name_resolution_failure(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(
        marker in text for marker in ("name or service not known", "nodename nor servname", "getaddrinfo", "no address")
    )
