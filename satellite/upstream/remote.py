"""Calls to remote upstream servers over pooled, long-lived MCP sessions.

Opening a session costs an HTTP round trip or two plus the initialize handshake; a call over an
open session costs one POST. :class:`RemoteUpstream` keeps a small pool of open sessions keyed by
``(installation_id, config_hash, hash of the resolved headers)``, so a changed configuration or
rotated credential never reuses an old session.

Each session lives in its own *owner task*: the SDK's transport and session task groups must be
entered and left by one task, and the calls come from many request tasks. The owner opens the
session, publishes it, and waits until the session breaks, idles past ``idle_seconds``, is evicted
or the pool closes. Owner tasks are plain asyncio tasks (the gateway runs on asyncio: uvicorn
locally, Mangum on Lambda, which reuses one loop across invocations and so keeps them alive).

Calls over one session run concurrently (the SDK multiplexes request ids). A call that finds its
reused session broken reconnects once; a timeout is never retried (the tool may have run).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from satellite.errors import FailureKind, InvalidInstallation, UpstreamError
from satellite.upstream.connection import UpstreamSession, classify_failure, open_session

if TYPE_CHECKING:
    from collections.abc import Mapping

    from satellite.installation import Installation

__all__ = ["RemoteUpstream"]

logger = logging.getLogger(__name__)

_PoolKey = tuple[str, str, str]
_CLOSE_GRACE_SECONDS = 5.0


@dataclass(eq=False, slots=True)
class _PooledSession:
    key: _PoolKey
    installation: Installation
    loop: asyncio.AbstractEventLoop
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    session: UpstreamSession | None = None
    error: UpstreamError | None = None
    closed: bool = False
    in_flight: int = 0
    uses: int = 0
    last_used: float = 0.0
    task: asyncio.Task[None] | None = None


class RemoteUpstream:
    """The :class:`~satellite.ports.Upstream` for Streamable HTTP and SSE installations.

    Results are the upstream's raw JSON result objects, unchanged. Create one per process and
    call :meth:`aclose` at shutdown.
    """

    def __init__(
        self,
        environment: Mapping[str, str],
        *,
        call_timeout: float,
        connect_timeout: float,
        idle_seconds: float = 300.0,
        max_sessions: int = 32,
    ) -> None:
        self._environment = environment
        self._call_timeout = call_timeout
        self._connect_timeout = connect_timeout
        self._idle_seconds = idle_seconds
        self._max_sessions = max(1, max_sessions)
        self._pool: dict[_PoolKey, _PooledSession] = {}
        self._owners: set[asyncio.Task[None]] = set()

    @property
    def open_sessions(self) -> int:
        """How many pooled sessions are open or opening (for tests and metrics)."""
        return sum(1 for entry in self._pool.values() if not entry.closed)

    async def call_tool(self, installation: Installation, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``tools/call`` and return the upstream result unchanged (an ``isError`` result included).

        Raises:
            UpstreamError: the upstream could not be reached, timed out, rejected the credentials,
                or answered with a JSON-RPC error.
        """
        return await self._request(installation, "tools/call", {"name": name, "arguments": dict(arguments)})

    async def read_resource(self, installation: Installation, uri: str) -> dict[str, Any]:
        """Run ``resources/read`` and return the upstream result unchanged (text and blob contents).

        Raises:
            UpstreamError: as :meth:`call_tool`.
        """
        return await self._request(installation, "resources/read", {"uri": uri})

    async def aclose(self) -> None:
        """Close every pooled session and wait (boundedly) for their owner tasks to finish."""
        for entry in self._pool.values():
            entry.stop.set()
        self._pool.clear()
        owners = [task for task in self._owners if not task.done()]
        if owners:
            _done, pending = await asyncio.wait(owners, timeout=_CLOSE_GRACE_SECONDS)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=_CLOSE_GRACE_SECONDS)

    async def _request(self, installation: Installation, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if not installation.transport.is_remote:
            raise InvalidInstallation("transport", f"{installation.slug}: stdio calls go through workers")
        try:
            with anyio.fail_after(self._call_timeout):
                return await self._request_with_retry(installation, method, params)
        except TimeoutError as exc:
            raise classify_failure(exc, installation, method) from exc

    async def _request_with_retry(
        self, installation: Installation, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        for attempt in (1, 2):
            entry = await self._acquire(installation)
            try:
                if entry is None:
                    return await self._one_shot(installation, method, params)
                assert entry.session is not None
                reused = entry.uses > 1
                try:
                    return await entry.session.request(method, params, timeout=self._call_timeout)
                except UpstreamError as exc:
                    broken = entry.closed or exc.kind is FailureKind.UNREACHABLE
                    if not broken:
                        raise
                    self._discard(entry)
                    if attempt == 2 or not reused:
                        raise (entry.error or exc) from exc
                    logger.info(
                        "reconnecting to a broken upstream session",
                        extra={"operation": method, "installation_id": installation.installation_id},
                    )
            finally:
                if entry is not None:
                    entry.in_flight -= 1
                    entry.last_used = anyio.current_time()
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _one_shot(self, installation: Installation, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # The pool is full of busy sessions: serve this call on its own connection rather than grow.
        async with open_session(
            installation, self._environment, timeout=self._call_timeout, connect_timeout=self._connect_timeout
        ) as upstream:
            return await upstream.request(method, params, timeout=self._call_timeout)

    async def _acquire(self, installation: Installation) -> _PooledSession | None:
        """A ready pooled session with ``in_flight`` taken, or ``None`` when the pool is full and busy."""
        key = self._key(installation)
        loop = asyncio.get_running_loop()
        entry = self._pool.get(key)
        if entry is not None and (entry.closed or entry.loop is not loop):
            # A session from another event loop cannot be driven from this one.
            self._discard(entry)
            entry = None
        if entry is None:
            if not self._make_room(key):
                return None
            entry = _PooledSession(key, installation, loop)
            self._pool[key] = entry
            entry.task = loop.create_task(self._own(entry), name=f"upstream-session:{installation.slug}")
            self._owners.add(entry.task)
            entry.task.add_done_callback(self._owners.discard)
        entry.in_flight += 1
        entry.uses += 1
        try:
            await entry.ready.wait()
        except BaseException:
            entry.in_flight -= 1
            raise
        if entry.session is None:
            entry.in_flight -= 1
            assert entry.error is not None
            raise entry.error
        return entry

    def _make_room(self, key: _PoolKey) -> bool:
        # A new configuration or credential for the same installation retires its older sessions.
        for other in list(self._pool.values()):
            if other.key[0] == key[0] and other.key != key and other.in_flight == 0:
                self._discard(other)
        if len(self._pool) < self._max_sessions:
            return True
        idle = [entry for entry in self._pool.values() if entry.in_flight == 0]
        if not idle:
            return False
        self._discard(min(idle, key=lambda entry: entry.last_used))
        return True

    def _discard(self, entry: _PooledSession) -> None:
        entry.stop.set()
        if self._pool.get(entry.key) is entry:
            del self._pool[entry.key]

    def _key(self, installation: Installation) -> _PoolKey:
        try:
            headers = installation.resolved_headers(self._environment)
        except InvalidInstallation as exc:
            raise UpstreamError(FailureKind.AUTH, f"{installation.slug}: {exc}") from exc
        digest = hashlib.sha256(json.dumps(headers, sort_keys=True).encode()).hexdigest()
        return (installation.installation_id, installation.config_hash, digest)

    async def _own(self, entry: _PooledSession) -> None:
        """Owner task of one pooled session: open it, hold it until told to stop or idle, close it."""
        installation = entry.installation
        try:
            async with open_session(
                installation,
                self._environment,
                timeout=self._call_timeout,
                connect_timeout=self._connect_timeout,
                stream_idle_timeout=max(self._idle_seconds, self._call_timeout),
            ) as upstream:
                entry.session = upstream
                entry.last_used = anyio.current_time()
                entry.ready.set()
                await self._hold(entry)
        except UpstreamError as exc:
            entry.error = exc
        except Exception as exc:  # top level of a detached task: nothing above it would see the error
            logger.exception(
                "upstream session owner failed",
                extra={"operation": "upstream_session", "installation_id": installation.installation_id},
            )
            entry.error = UpstreamError(
                FailureKind.PROTOCOL, f"{installation.slug}: upstream {installation.url} session failed: {exc}"
            )
        finally:
            entry.closed = True
            if entry.error is None and entry.session is None:
                entry.error = UpstreamError(
                    FailureKind.UNREACHABLE, f"{installation.slug}: upstream session was closed before it opened"
                )
            entry.ready.set()
            if self._pool.get(entry.key) is entry:
                del self._pool[entry.key]

    async def _hold(self, entry: _PooledSession) -> None:
        while True:
            idle_until = entry.last_used + self._idle_seconds
            with anyio.move_on_after(max(0.0, idle_until - anyio.current_time())):
                await entry.stop.wait()
                return
            if entry.in_flight == 0 and anyio.current_time() >= entry.last_used + self._idle_seconds:
                logger.debug(
                    "closing idle upstream session",
                    extra={"operation": "upstream_session", "installation_id": entry.installation.installation_id},
                )
                if self._pool.get(entry.key) is entry:
                    del self._pool[entry.key]
                return
            if entry.in_flight:
                # Busy at the deadline: look again after a full idle period from now.
                entry.last_used = anyio.current_time()
