"""Running stdio MCP servers as subprocesses on a worker: spawn, discover, serve, idle out, restart, stop.

One :class:`StdioProcessManager` per worker process. Each installation gets at most one running server
here, driven by its own *supervisor task* (the SDK's transport and session task groups must be entered and
left by one task) that owns one long-lived ``ClientSession``; calls from many request tasks share it and the
SDK multiplexes their JSON-RPC ids.

Lifecycle of one server::

    stopped ──call/discover──▶ starting ──handshake (+ discovery)──▶ running ──idle/evicted/stop──▶ stopped
                                  ▲  │ exits                            │ exits (crash)
                                  │  ▼                                  ▼
                                  └─ backoff (1 s, 5 s, 15 s) ◀─────────┘
                                     more than 3 restarts in 5 minutes ──▶ error (calls fail fast)

* **Spawn.** The SDK's ``stdio_client`` starts the child in a new session, so the child's pid is its process
  group id. A two-line ``/bin/sh`` launcher writes that pid to a file and ``exec``\\ s the command (same pid),
  which is how the manager learns the group the SDK does not expose. The child's environment is a minimal
  base (``PATH``, ``LANG``, ``HOME`` and ``TMPDIR`` inside the installation's folder) plus the installation's
  own ``env`` with ``${VAR}`` placeholders resolved; the SDK adds a few login variables (``USER``,
  ``SHELL``...), which the launcher unsets. Nothing else of the worker's environment (no AWS credentials)
  reaches the child. The working directory is ``<worker_root>/<team>/<installation>/work``; stderr goes to
  ``stderr.log`` next to it and its tail explains start failures.
* **Discovery** runs right after the handshake, with the same listing and sanitising as remote discovery
  (:func:`satellite.upstream.discovery.discover_catalog`), only when nothing is cached for the current
  configuration hash (a first spawn, a changed configuration) or when a ``discover`` request asks for it. It
  is stored with ``replace_catalog`` and published as ``mcp.tools.discovered``. A respawn sends no
  ``tools/list``.
* **Idle.** A server with no call for ``idle_timeout_seconds`` is stopped, its whole process group
  included (launchers such as ``npx``/``uvx`` leave children); its status becomes ``dormant`` and its tools
  stay cached.
* **Crash.** A child that exits while running, or during its start, is restarted after 1 s, 5 s and 15 s;
  a fourth crash within 5 minutes puts it in ``error``: calls fail fast with a message saying so until its
  configuration changes or a ``discover`` request (a recovery check) starts it successfully. A call in
  flight when the child dies fails with an upstream error saying the server crashed.
* **Cannot start.** A command that is not found or may not run, or a ``${VAR}`` the worker does not define,
  puts the installation in ``error`` at once, classified by :mod:`satellite.classify` with a suggestion.
* **Cap.** At most ``max_processes`` servers run; starting one more first stops the least recently used
  idle server, and is refused when every running server is busy.
* **Uninstall** stops the process and deletes the installation's folder (its state files). The cached
  tools, resources and templates are removed by the installations API (``CatalogStore.remove_installation``)
  in the same write that removes the installation; the worker never deletes catalog entries, so a removal
  and a re-add can never interleave with a worker's delete.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import shutil
import signal
import uuid
from collections import Counter, deque
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.client.session import ClientSession
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, JSONRPCRequest
from pydantic import ValidationError

from satellite.catalog import (
    DiscoveredCatalog,
    DiscoveryState,
    ErrorClass,
    InstallationCatalog,
    InstallationStatus,
    Status,
)
from satellite.classify import classify, failure_kind_of
from satellite.errors import (
    ConflictError,
    FailureKind,
    InvalidInstallation,
    NotFound,
    StoreError,
    Unavailable,
    UpstreamError,
)
from satellite.installation import resolve_placeholders
from satellite.upstream.connection import CLIENT_INFO, UpstreamSession
from satellite.upstream.discovery import discover_catalog

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import TracebackType

    from anyio.abc import TaskGroup
    from mcp.client._transport import ReadStream, WriteStream
    from mcp.shared.message import SessionMessage

    from satellite.config import Settings
    from satellite.installation import Installation
    from satellite.ports import CatalogStore, EventPublisher

__all__ = [
    "DEFAULT_BACKOFF_SECONDS",
    "RESTART_WINDOW_SECONDS",
    "ServerInfo",
    "ServerState",
    "StdioProcessManager",
    "child_environment",
    "group_members",
    "process_group_alive",
    "resolve_command",
]

logger = logging.getLogger(__name__)

DEFAULT_BACKOFF_SECONDS = (1.0, 5.0, 15.0)
RESTART_WINDOW_SECONDS = 300.0
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_STDERR_TAIL_CHARS = 600
_GROUP_STOP_GRACE_SECONDS = 3.0
_GROUP_POLL_SECONDS = 0.02
_CRASH_LOOP_SUGGESTION = (
    "the server exits right after it starts: check its command, args and env (stderr is in the error)"
)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# Runs as the child itself: records its pid (= its process group, the SDK starts a new session), drops the
# login variables the SDK passes by default, then execs the server under the same pid.
_LAUNCHER = 'echo $$ >"$0" && exec "$@"'


class ServerState(StrEnum):
    """Where one installation's server stands on this worker."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """A snapshot of one installation's server on this worker (for tests, metrics and the debug route).

    ``requests_sent`` counts the JSON-RPC requests sent to every process of this installation, by method.
    """

    installation_id: str
    state: ServerState
    pid: int | None
    restarts: int
    spawns: int
    in_flight: int
    last_error: str | None
    requests_sent: Mapping[str, int]


@dataclass(eq=False)
class _Server:
    installation: Installation
    folder: Path
    discovered_hash: str | None
    state: ServerState = ServerState.STOPPED
    changed: anyio.Event = field(default_factory=anyio.Event)
    wake: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    session: UpstreamSession | None = None
    pid: int | None = None
    failure: str | None = None
    stop_reason: str | None = None
    in_flight: int = 0
    last_used: float = 0.0
    last_discovery: float = -math.inf
    last_catalog: DiscoveredCatalog | None = None
    spawns: int = 0
    restarts: deque[float] = field(default_factory=deque)
    sent: Counter[str] = field(default_factory=Counter)

    def set_state(self, state: ServerState) -> None:
        self.state = state
        self.changed.set()
        self.changed = anyio.Event()

    def request_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        self.wake.set()

    @property
    def active(self) -> bool:
        return self.state in (ServerState.STARTING, ServerState.RUNNING, ServerState.STOPPING, ServerState.BACKOFF)


@dataclass(slots=True)
class _Run:
    """One process of a server: whether its stdout ended (the child exited)."""

    wake: anyio.Event
    ended: bool = False

    def end(self) -> None:
        self.ended = True
        self.wake.set()


class StdioProcessManager:
    """Runs stdio installations' servers on this worker and executes calls on them.

    Use as an async context manager: leaving it stops every server and its process group.

    Args:
        settings: ``idle_timeout_seconds``, ``max_processes``, ``worker_root``, ``limits``,
            ``discovery_timeout_seconds`` (start and discovery bound) and ``environment`` (placeholders).
        store: where discoveries and status changes are recorded.
        events: publishes ``mcp.tools.discovered`` after each stored discovery.
        now: the wall clock for ``discovered_at`` and status times.
        backoff: the delays before the first, second and third restart within ``restart_window``
            seconds; one more crash within the window puts the server in error.
    """

    def __init__(
        self,
        settings: Settings,
        store: CatalogStore,
        *,
        events: EventPublisher | None = None,
        now: Callable[[], datetime] | None = None,
        backoff: Sequence[float] = DEFAULT_BACKOFF_SECONDS,
        restart_window: float = RESTART_WINDOW_SECONDS,
    ) -> None:
        self._settings = settings
        self._store = store
        self._events = events
        self._now = now or _utc_now
        self._backoff = tuple(backoff)
        self._restart_window = restart_window
        self._root = Path(settings.worker_root)
        self._servers: dict[str, _Server] = {}
        self._lock = anyio.Lock()
        self._stack: AsyncExitStack | None = None
        self._group: TaskGroup | None = None

    async def __aenter__(self) -> StdioProcessManager:
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.stop_all()
        finally:
            stack, self._stack, self._group = self._stack, None, None
            if stack is not None:
                await stack.__aexit__(exc_type, exc, tb)

    def servers(self) -> list[ServerInfo]:
        """A snapshot of every installation this worker knows, running or not."""
        return [self._info(server) for server in self._servers.values()]

    def server(self, installation_id: str) -> ServerInfo | None:
        """A snapshot of one installation's server, or ``None`` if this worker never saw it."""
        server = self._servers.get(installation_id)
        return None if server is None else self._info(server)

    def running_count(self) -> int:
        """How many servers are starting, running, stopping or waiting to restart."""
        return sum(1 for server in self._servers.values() if server.active)

    async def call_tool(
        self, entry: InstallationCatalog, name: str, arguments: Mapping[str, Any], *, timeout: float
    ) -> dict[str, Any]:
        """Run ``tools/call`` on the installation's server (spawning it if needed); the raw MCP result.

        Raises:
            Unavailable: the server is in error, cannot start, or the worker is full of busy servers.
            UpstreamError: the server crashed during the call, did not answer within ``timeout``, or
                answered with a JSON-RPC error.
        """
        return await self._request(entry, "tools/call", {"name": name, "arguments": dict(arguments)}, timeout)

    async def read_resource(self, entry: InstallationCatalog, uri: str, *, timeout: float) -> dict[str, Any]:
        """Run ``resources/read`` on the installation's server; the raw MCP result.

        Raises:
            Unavailable: as :meth:`call_tool`.
            UpstreamError: as :meth:`call_tool`.
        """
        return await self._request(entry, "resources/read", {"uri": uri}, timeout)

    async def discover(self, entry: InstallationCatalog) -> DiscoveredCatalog:
        """Spawn the server if needed and discover it now; the discovery is stored and published.

        This is also the recovery check: a server in error is reset and started again.

        Raises:
            Unavailable: the server cannot start or crashed while starting.
            UpstreamError: listing failed (the failure is recorded in the installation's status).
        """
        requested = anyio.current_time()
        server = await self._acquire(entry, recovery=True)
        try:
            if server.last_discovery >= requested and server.last_catalog is not None:
                # Starting the server just discovered it: one listing is enough.
                return server.last_catalog
            assert server.session is not None
            try:
                return await self._discover_on(server, server.session)
            except UpstreamError as exc:
                await self._record_failure(server, exc.kind.value, exc.message)
                raise
        finally:
            self._release(server)

    async def stop(self, installation_id: str, *, uninstall: bool = False) -> bool:
        """Stop the installation's server and its process group; ``uninstall`` also forgets it and its folder.

        Returns whether a process was running.
        """
        server = self._servers.get(installation_id)
        if server is None:
            if uninstall:
                await self._remove_folders(installation_id)
            return False
        was_active = server.active
        server.request_stop("uninstalled" if uninstall else "stopped")
        if was_active:
            await server.done.wait()
        if uninstall:
            self._servers.pop(installation_id, None)
            await anyio.to_thread.run_sync(partial(shutil.rmtree, server.folder, ignore_errors=True))
        return was_active

    async def stop_all(self) -> None:
        """Stop every server and its process group (worker shutdown); tools stay cached."""
        active = [server for server in self._servers.values() if server.active]
        for server in active:
            server.request_stop("shutdown")
        for server in active:
            await server.done.wait()

    # -- calls ---------------------------------------------------------------------------------------

    async def _request(
        self, entry: InstallationCatalog, method: str, params: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        deadline = anyio.current_time() + timeout
        with anyio.fail_after(timeout):
            server = await self._acquire(entry, recovery=False)
        try:
            assert server.session is not None
            dispatcher = server.session.dispatcher
            remaining = max(deadline - anyio.current_time(), 0.001)
            try:
                return await dispatcher.send_raw_request(method, params, {"timeout": remaining})
            except MCPError as exc:
                raise self._call_failure(server, method, exc, timeout) from exc
        finally:
            self._release(server)

    def _call_failure(self, server: _Server, method: str, exc: MCPError, timeout: float) -> UpstreamError:
        slug = server.installation.slug
        if exc.code == CONNECTION_CLOSED:
            if server.stop_reason is not None:
                return UpstreamError(
                    FailureKind.UNREACHABLE,
                    f"{slug}: the stdio server was stopped ({server.stop_reason}) during {method}",
                )
            return UpstreamError(
                FailureKind.UNREACHABLE,
                f"{slug}: the stdio server crashed during {method}; it will be restarted "
                "(the call may or may not have taken effect)",
            )
        if exc.code == REQUEST_TIMEOUT:
            return UpstreamError(
                FailureKind.TIMEOUT, f"{slug}: the stdio server did not answer {method} within {timeout:.1f} s"
            )
        return UpstreamError(
            FailureKind.PROTOCOL, f"{slug}: the server answered {method} with MCP error {exc.code}: {exc.message}"
        )

    async def _acquire(self, entry: InstallationCatalog, *, recovery: bool) -> _Server:
        """The installation's running server with one call counted in flight (see :meth:`_release`)."""
        server = await self._server_for(entry)
        if recovery and server.state is ServerState.ERROR:
            logger.info("recovery check", extra=server.installation.log_fields("recover"))
            server.restarts.clear()
            server.failure = None
            server.set_state(ServerState.STOPPED)
        server.in_flight += 1
        server.last_used = anyio.current_time()
        try:
            may_start = True
            while True:
                state = server.state
                if state is ServerState.RUNNING and server.session is not None and server.stop_reason is None:
                    return server
                if state is ServerState.ERROR:
                    raise Unavailable(server.failure or f"{server.installation.slug}: the stdio server is in error")
                if state is ServerState.STOPPED:
                    if not may_start:
                        raise Unavailable(
                            server.failure
                            or f"{server.installation.slug}: the stdio server stopped before it was ready"
                        )
                    await self._start(server)
                    may_start = False
                    continue
                if state is not ServerState.STOPPING:
                    may_start = False
                await server.changed.wait()
        except BaseException:
            self._release(server)
            raise

    def _release(self, server: _Server) -> None:
        server.in_flight -= 1
        server.last_used = anyio.current_time()

    async def _server_for(self, entry: InstallationCatalog) -> _Server:
        installation = entry.installation
        if installation.transport.is_remote or not installation.command:
            raise Unavailable(f"{installation.slug}: not a stdio installation; remote servers are called directly")
        server = self._servers.get(installation.installation_id)
        if server is not None and server.installation.config_hash == installation.config_hash:
            return server
        if server is not None:
            # The configuration changed: the old process goes, restart counters and errors are forgotten.
            logger.info("configuration changed; restarting", extra=installation.log_fields("reconfigure"))
            if server.active:
                server.request_stop("configuration changed")
                await server.done.wait()
        cached = entry.discovered_config_hash if entry.discovered_at is not None else None
        replacement = _Server(installation, self._folder(installation), discovered_hash=cached)
        replacement.done.set()
        self._servers[installation.installation_id] = replacement
        return replacement

    async def _start(self, server: _Server) -> None:
        async with self._lock:
            if server.state is not ServerState.STOPPED:
                return
            await self._make_room(server)
            if server.state is not ServerState.STOPPED:
                return
            assert self._group is not None, "use StdioProcessManager as an async context manager"
            server.stop_reason = None
            server.failure = None
            server.done = anyio.Event()
            server.set_state(ServerState.STARTING)
            self._group.start_soon(self._supervise, server, name=f"stdio-server:{server.installation.slug}")

    async def _make_room(self, server: _Server) -> None:
        limit = max(1, self._settings.max_processes)
        others = [other for other in self._servers.values() if other.active and other is not server]
        if len(others) < limit:
            return
        idle = [other for other in others if other.state is ServerState.RUNNING and other.in_flight == 0]
        if not idle:
            raise Unavailable(
                f"{server.installation.slug}: this worker already runs its maximum of {limit} stdio servers and "
                "all of them are busy; try again shortly"
            )
        victim = min(idle, key=lambda other: other.last_used)
        logger.info("stopping the least recently used idle server", extra=victim.installation.log_fields("evict"))
        victim.request_stop("evicted")
        await victim.done.wait()

    # -- supervision ---------------------------------------------------------------------------------

    async def _supervise(self, server: _Server) -> None:
        """Owner task of one server: start it, hold it, restart it after crashes, record what happens."""
        try:
            while True:
                crashed = await self._run_process(server)
                if not crashed or server.stop_reason is not None:
                    return
                horizon = anyio.current_time() - self._restart_window
                while server.restarts and server.restarts[0] < horizon:
                    server.restarts.popleft()
                if len(server.restarts) >= len(self._backoff):
                    await self._crash_loop(server)
                    return
                delay = self._backoff[len(server.restarts)]
                server.restarts.append(anyio.current_time())
                logger.warning(
                    "stdio server crashed; restarting",
                    extra={
                        **server.installation.log_fields("restart"),
                        "delay_seconds": delay,
                        "error": server.failure,
                    },
                )
                server.wake = anyio.Event()
                server.set_state(ServerState.BACKOFF)
                with anyio.move_on_after(delay):
                    await server.wake.wait()
                if server.stop_reason is not None:
                    return
                server.set_state(ServerState.STARTING)
        except Exception:  # top level of a detached task: nothing above it would see the error
            logger.exception("stdio supervisor failed", extra=server.installation.log_fields("supervise"))
            server.failure = f"{server.installation.slug}: the worker failed to run the stdio server (see worker logs)"
        finally:
            server.session = None
            server.pid = None
            if server.state is not ServerState.ERROR:
                server.set_state(ServerState.STOPPED)
            server.done.set()

    async def _run_process(self, server: _Server) -> bool:
        """Run one process of the server until it stops (``False``) or crashes (``True``)."""
        installation = server.installation
        server.wake = anyio.Event()
        run = _Run(server.wake)
        try:
            parameters, pidfile, stderr_path = await anyio.to_thread.run_sync(
                self._prepare, installation, server.folder
            )
        except (FileNotFoundError, PermissionError, InvalidInstallation) as exc:
            await self._cannot_start(server, exc)
            return False
        timeout = installation.timeout_seconds or self._settings.discovery_timeout_seconds
        deadline = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        pid: int | None = None
        failure: BaseException | None = None
        server.spawns += 1
        try:
            with deadline:
                async with AsyncExitStack() as stack:
                    errlog = stack.enter_context(stderr_path.open("w", encoding="utf-8"))
                    read_stream, write_stream = await stack.enter_async_context(stdio_client(parameters, errlog))
                    dispatcher = JSONRPCDispatcher(
                        _WatchedReadStream(read_stream, run.end), _CountingWriteStream(write_stream, server.sent)
                    )
                    session = await stack.enter_async_context(
                        ClientSession(dispatcher=dispatcher, client_info=CLIENT_INFO)
                    )
                    try:
                        await session.initialize()
                    finally:
                        pid = _read_pid(pidfile)
                    server.pid = pid
                    upstream = UpstreamSession(installation, session, dispatcher, timeout)
                    if server.discovered_hash != installation.config_hash:
                        await self._discover_on(server, upstream)
                    else:
                        await self._mark_online(server)
                    deadline.deadline = math.inf
                    server.session = upstream
                    server.set_state(ServerState.RUNNING)
                    logger.info("stdio server running", extra={**installation.log_fields("spawn"), "pid": pid})
                    crashed = await self._hold(server, run)
                    server.session = None
                    if not crashed:
                        server.set_state(ServerState.STOPPING)
        except (MCPError, UpstreamError, ValidationError, OSError, anyio.BrokenResourceError) as exc:
            failure = exc
        except BaseExceptionGroup as group:
            if group.subgroup(lambda leaf: not isinstance(leaf, Exception)) is not None:
                raise
            failure = group
        finally:
            server.session = None
            if pid is not None:
                await _stop_group(pid)
            with contextlib.suppress(OSError):
                pidfile.unlink()
        if deadline.cancelled_caught:
            return await self._start_failed(
                server, UpstreamError(FailureKind.TIMEOUT, f"did not start and answer within {timeout:.0f} s")
            )
        if failure is not None:
            if run.ended or not isinstance(failure, UpstreamError):
                server.failure = self._crash_message(server, stderr_path)
                return True
            return await self._start_failed(server, failure)
        if run.ended and server.stop_reason is None:
            server.failure = self._crash_message(server, stderr_path)
            return True
        if server.stop_reason in ("idle", "evicted", "stopped"):
            await self._mark_dormant(server)
        return False

    async def _hold(self, server: _Server, run: _Run) -> bool:
        """Wait until the server is told to stop, idles out (``False``) or its process exits (``True``)."""
        idle_timeout = self._settings.idle_timeout_seconds
        while True:
            if server.stop_reason is not None:
                return False
            if run.ended:
                return True
            idle_for = anyio.current_time() - server.last_used
            if server.in_flight == 0 and idle_for >= idle_timeout:
                logger.info("stopping idle stdio server", extra=server.installation.log_fields("idle"))
                server.stop_reason = "idle"
                return False
            wait = idle_timeout - idle_for if server.in_flight == 0 else idle_timeout
            with anyio.move_on_after(max(wait, 0.0)):
                await run.wake.wait()

    def _prepare(self, installation: Installation, folder: Path) -> tuple[StdioServerParameters, Path, Path]:
        """The launch parameters, pid file and stderr log of one spawn; creates the folders.

        Raises:
            FileNotFoundError: the command is not found.
            PermissionError: the command may not be run.
            InvalidInstallation: an env placeholder names a variable the worker does not define.
        """
        work = folder / "work"
        for path in (work, folder / "home", folder / "tmp"):
            path.mkdir(parents=True, exist_ok=True)
        environment = child_environment(installation, folder, self._settings.environment)
        command = resolve_command(str(installation.command), environment["PATH"], work)
        pidfile = folder / f"launch-{uuid.uuid4().hex[:12]}.pid"
        dropped = sorted(name for name in DEFAULT_INHERITED_ENV_VARS if name not in environment)
        script = (f"unset {' '.join(dropped)}; " if dropped else "") + _LAUNCHER
        parameters = StdioServerParameters(
            command="/bin/sh",
            args=["-c", script, str(pidfile), command, *installation.args],
            env=environment,
            cwd=str(work),
        )
        return parameters, pidfile, folder / "stderr.log"

    # -- discovery and status ------------------------------------------------------------------------

    async def _discover_on(self, server: _Server, upstream: UpstreamSession) -> DiscoveredCatalog:
        installation = server.installation
        started = anyio.current_time()
        catalog = await discover_catalog(upstream, self._settings.limits, self._now())
        server.last_discovery = started
        server.last_catalog = catalog
        server.discovered_hash = installation.config_hash
        stored = await self._write(
            server,
            "replace_catalog",
            self._store.replace_catalog,
            installation.team_id,
            installation.installation_id,
            catalog,
        )
        if stored and self._events is not None:
            await self._write(server, "publish", self._events.publish_tools_discovered, installation, catalog)
        logger.info(
            "stdio server discovered",
            extra={
                **installation.log_fields("discover"),
                "tools": len(catalog.tools),
                "resources": len(catalog.resources),
                "templates": len(catalog.templates),
                "warnings": len(catalog.warnings),
            },
        )
        return catalog

    async def _mark_online(self, server: _Server) -> None:
        status = InstallationStatus(Status.ONLINE, self._now(), discovery=DiscoveryState.SUCCESS)
        await self._set_status(server, status, expected=(Status.DORMANT, Status.ERROR, Status.OFFLINE))

    async def _mark_dormant(self, server: _Server) -> None:
        status = InstallationStatus(Status.DORMANT, self._now(), discovery=DiscoveryState.SUCCESS)
        await self._set_status(server, status, expected=(Status.ONLINE,))

    async def _cannot_start(self, server: _Server, exc: BaseException) -> None:
        installation = server.installation
        kind = failure_kind_of(exc)
        command = str(installation.command)
        if kind is not None and kind.value == "command_not_found":
            message = f"command not found: {command!r} is not on the worker's PATH"
        elif kind is not None and kind.value == "permission_denied":
            message = f"permission denied: {command!r} cannot be executed"
        else:
            message = str(exc)
        classification = classify(kind.value if kind is not None else "invalid_configuration", message, command=command)
        server.failure = f"{installation.slug}: {message}; {classification.suggestion}"
        logger.warning("stdio server cannot start", extra={**installation.log_fields("spawn"), "error": message})
        await self._set_status(server, classification.to_status(self._now(), message))
        server.set_state(ServerState.ERROR)

    async def _start_failed(self, server: _Server, exc: UpstreamError) -> bool:
        # A server that runs but fails its handshake, discovery or start deadline: recorded, not restarted.
        message = f"{server.installation.slug}: {exc.message}"
        server.failure = message
        await self._record_failure(server, exc.kind.value, message)
        return False

    async def _record_failure(self, server: _Server, kind: str, message: str) -> None:
        classification = classify(kind, message)
        await self._set_status(server, classification.to_status(self._now(), message))

    async def _crash_loop(self, server: _Server) -> None:
        installation = server.installation
        restarts = len(self._backoff)
        message = (
            f"{installation.slug}: the stdio server crashed {restarts + 1} times within "
            f"{self._restart_window:.0f} s and is not restarted; calls fail until its configuration changes or a "
            f"recovery check succeeds. Last failure: {server.failure}"
        )
        server.failure = message
        logger.error("stdio server in a crash loop", extra={**installation.log_fields("restart"), "error": message})
        status = InstallationStatus(
            Status.ERROR,
            self._now(),
            last_error=message,
            failure_kind="crashed",
            discovery=DiscoveryState.FAILED,
            error_class=ErrorClass.NEEDS_USER_ACTION,
            suggestion=_CRASH_LOOP_SUGGESTION,
        )
        await self._set_status(server, status)
        # Only now: a waiter woken by the state change finds the status already recorded.
        server.set_state(ServerState.ERROR)

    async def _set_status(
        self, server: _Server, status: InstallationStatus, expected: Sequence[Status] | None = None
    ) -> None:
        installation = server.installation
        await self._write(
            server,
            "set_status",
            partial(self._store.set_status, expected=expected, config_hash=installation.config_hash),
            installation.team_id,
            installation.installation_id,
            status,
        )

    async def _write(self, server: _Server, operation: str, write: Callable[..., None], *args: Any) -> bool:
        """Run one store or event write in a thread; failures are logged (status is best effort)."""
        try:
            await anyio.to_thread.run_sync(partial(write, *args))
        except (ConflictError, NotFound) as exc:
            logger.info(
                "store write superseded", extra={**server.installation.log_fields(operation), "reason": str(exc)}
            )
            return False
        except StoreError as exc:
            logger.warning("store write failed", extra={**server.installation.log_fields(operation), "error": str(exc)})
            return False
        return True

    # -- helpers -------------------------------------------------------------------------------------

    def _crash_message(self, server: _Server, stderr_path: Path) -> str:
        tail = _tail(stderr_path)
        where = "during its start" if server.state is ServerState.STARTING else "while running"
        return f"{server.installation.slug}: the stdio server exited {where}" + (f"; stderr: {tail}" if tail else "")

    def _folder(self, installation: Installation) -> Path:
        return (
            self._root / _SAFE_NAME.sub("_", installation.team_id) / _SAFE_NAME.sub("_", installation.installation_id)
        )

    async def _remove_folders(self, installation_id: str) -> None:
        pattern = _SAFE_NAME.sub("_", installation_id)
        for folder in self._root.glob(f"*/{pattern}"):
            await anyio.to_thread.run_sync(partial(shutil.rmtree, folder, ignore_errors=True))

    def _info(self, server: _Server) -> ServerInfo:
        return ServerInfo(
            installation_id=server.installation.installation_id,
            state=server.state,
            pid=server.pid,
            restarts=len(server.restarts),
            spawns=server.spawns,
            in_flight=server.in_flight,
            last_error=server.failure,
            requests_sent=dict(server.sent),
        )


class _WatchedReadStream:
    """The transport's read stream, calling ``on_end`` once the child's stdout ends (it exited)."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _CountingWriteStream:
    """The transport's write stream, counting the requests sent by method."""

    def __init__(self, inner: WriteStream[SessionMessage], sent: Counter[str]) -> None:
        self._inner = inner
        self._sent = sent

    async def send(self, item: SessionMessage, /) -> None:
        if isinstance(item.message, JSONRPCRequest):
            self._sent[item.message.method] += 1
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _CountingWriteStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def child_environment(
    installation: Installation, folder: Path, worker_environment: Mapping[str, str]
) -> dict[str, str]:
    """The whole environment of an installation's server: a minimal base plus its own resolved ``env``.

    Raises:
        InvalidInstallation: a ``${VAR}`` placeholder names a variable ``worker_environment`` lacks.
    """
    base = {
        "PATH": worker_environment.get("PATH") or DEFAULT_PATH,
        "HOME": str(folder / "home"),
        "TMPDIR": str(folder / "tmp"),
        "LANG": worker_environment.get("LANG") or "C.UTF-8",
    }
    return {**base, **resolve_placeholders(installation.env, worker_environment, "env")}


def resolve_command(command: str, path: str, cwd: Path) -> str:
    """The absolute path of ``command`` as the child would run it (``PATH`` lookup for bare names).

    Raises:
        FileNotFoundError: nothing of that name exists.
        PermissionError: it exists but is not an executable file.
    """
    if os.sep in command:
        candidate = Path(command) if os.path.isabs(command) else cwd / command
        if not candidate.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file", command)
        if not candidate.is_file() or not os.access(candidate, os.X_OK):
            raise PermissionError(errno.EACCES, "not an executable file", command)
        return str(candidate)
    found = shutil.which(command, path=path)
    if found is not None:
        return found
    for folder in path.split(os.pathsep):
        if folder and (Path(folder) / command).is_file():
            raise PermissionError(errno.EACCES, "not executable", str(Path(folder) / command))
    raise FileNotFoundError(errno.ENOENT, "not found on PATH", command)


def process_group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process belongs to process group ``pgid`` (Linux ``/proc``)."""
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """The pids of the live (non-zombie) processes in process group ``pgid`` (Linux ``/proc``)."""
    members = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue
            # After the command name: state, ppid, pgrp.
            if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


async def _stop_group(pgid: int) -> None:
    """SIGTERM the process group, wait (bounded) for it to go, SIGKILL what is left."""
    if not process_group_alive(pgid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with anyio.move_on_after(_GROUP_STOP_GRACE_SECONDS):
        while process_group_alive(pgid):
            await anyio.sleep(_GROUP_POLL_SECONDS)
        return
    logger.warning("process group survived SIGTERM; killing it", extra={"operation": "stop", "pgid": pgid})
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as stream:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            stream.seek(max(0, size - _STDERR_TAIL_CHARS))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return " ".join(text.split())[-_STDERR_TAIL_CHARS:]


def _utc_now() -> datetime:
    return datetime.now(UTC)
