"""The stdio worker: long-polls the request queue, runs each request once, replies on the caller's reply queue.

For every message (at most ``worker_concurrency`` at once):

1. **Parse** it as a version-1 :class:`~satellite.stdio.messages.Request`. A body that is not one but still
   names a ``request_id`` and a ``reply_to`` gets an ``invalid`` reply and is deleted (retrying cannot fix it
   and the caller learns at once); anything else is left alone and reaches the dead-letter queue after the
   queue's ``maxReceiveCount``.
2. **Deadline.** A request already past its deadline is never executed: it gets an ``expired`` reply.
3. **Claim** the request id (:class:`~satellite.aws.claims_store.DynamoClaimsStore`, conditional put with a
   TTL). A request someone already claimed is never executed again: it gets the recorded reply when there is
   one, else a ``duplicate`` error. ``discover`` and ``stop`` are idempotent and not claimed. When the claim
   itself fails (store error) the message is left for redelivery: running it unclaimed could run it twice.
4. **Execute** on the :class:`~satellite.stdio.process.StdioProcessManager`, bounded by the deadline; the
   message's visibility is extended while it runs, so a long call is never redelivered meanwhile.
5. **Record** the reply on the claim, **send** it to ``reply_to`` (message attribute ``correlation_id`` =
   the request id), **delete** the message.

Stop (SIGTERM, a Fargate stop): :meth:`Worker.stop` makes the worker take no new work (a long poll in
progress is abandoned; whatever it returns becomes visible again after the visibility timeout, unexecuted),
lets in-flight requests finish within ``worker_stop_grace_seconds``, then stops every child process group.

Several workers. Every worker that receives a request for an installation runs its own copy of that
installation's server; nothing is shared between workers but the catalog. So with N workers an installation
has at most N processes (each worker at most one, and at most ``max_processes`` servers in all), and each
copy stops after ``idle_timeout_seconds`` without calls, so rarely used servers shrink back to one copy or
none. Tool calls to most servers are stateless per call, so which copy answers does not matter. Stateful
servers (memory, filesystem) keep their state in files under their working folder on that worker
(``<worker_root>/<team>/<installation>``, or wherever their ``env`` points): copies on different workers
do not see each other's state. Such servers need one worker, or state on shared storage (point their
``env``, e.g. ``MEMORY_FILE_PATH``, at an EFS mount).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from botocore.exceptions import BotoCoreError, ClientError

from satellite.errors import InvalidInstallation, NotFound, StoreError, Unavailable, UpstreamError
from satellite.stdio.messages import Reply, ReplyError, Request, RequestKind
from satellite.stdio.process import StdioProcessManager

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from satellite.catalog import InstallationCatalog, TeamCatalog
    from satellite.config import Settings
    from satellite.ports import CatalogStore, EventPublisher, RequestClaims

__all__ = ["MAX_REPLY_BYTES", "Worker"]

logger = logging.getLogger(__name__)

# SQS refuses bodies over 256 KiB; attributes and the envelope need a little room.
MAX_REPLY_BYTES = 250 * 1024
_MAX_BATCH = 10
_DEFAULT_VISIBILITY_SECONDS = 30


@dataclass(slots=True)
class _Installations:
    """The worker's view of team catalogs: reloaded when a request names an unknown or changed installation."""

    store: CatalogStore
    teams: dict[str, TeamCatalog] = field(default_factory=dict)

    async def get(self, request: Request, *, fresh: bool) -> InstallationCatalog:
        entry = None if fresh else self._find(request)
        if entry is None or entry.installation.config_hash != request.config_hash:
            catalog = await anyio.to_thread.run_sync(self.store.load_catalog, request.team_id)
            self.teams[request.team_id] = catalog
            entry = self._find(request)
        if entry is None:
            raise NotFound(f"installation {request.installation_id!r} of team {request.team_id!r} does not exist")
        return entry

    def _find(self, request: Request) -> InstallationCatalog | None:
        catalog = self.teams.get(request.team_id)
        if catalog is None:
            return None
        return next(
            (e for e in catalog.installations if e.installation.installation_id == request.installation_id), None
        )


class Worker:
    """One stdio worker: the request loop around a :class:`StdioProcessManager` it owns.

    Args:
        settings: ``worker_queue_url``, ``worker_concurrency``, ``worker_stop_grace_seconds``,
            ``claim_ttl_seconds`` and the process manager's settings.
        sqs: a low-level SQS client (request queue and reply queues).
        claims: the request-id claims.
        store: the catalog store (installations; discoveries and status are recorded there).
        events: publishes ``mcp.tools.discovered``.
        wait_time_seconds: the long-poll wait of each receive (at most 20).
        now: the wall clock (deadlines).
        manager: the process manager to use (default: one built from the arguments above).
    """

    def __init__(
        self,
        settings: Settings,
        sqs: SQSClient,
        claims: RequestClaims,
        store: CatalogStore,
        *,
        events: EventPublisher | None = None,
        wait_time_seconds: int = 20,
        now: Callable[[], datetime] | None = None,
        manager: StdioProcessManager | None = None,
    ) -> None:
        self._settings = settings
        self._sqs = sqs
        self._claims = claims
        self._queue_url = settings.worker_queue_url
        self._wait_time = max(0, min(20, wait_time_seconds))
        self._now = now or _utc_now
        self._installations = _Installations(store)
        self.manager = manager or StdioProcessManager(settings, store, events=events, now=self._now)
        self._stopping = anyio.Event()
        self._drained = anyio.Event()
        self._visibility = _DEFAULT_VISIBILITY_SECONDS
        self.handled = 0

    def stop(self) -> None:
        """Take no new work; :meth:`run` returns once in-flight requests finished (or the grace ran out)."""
        self._stopping.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the request queue until :meth:`stop`; then finish in-flight work and stop every child.

        ``task_status.started()`` fires once the worker polls the queue.
        """
        if not self._queue_url:
            raise InvalidInstallation("SATELLITE_WORKER_QUEUE_URL", "the worker needs its request queue URL")
        self._visibility = await anyio.to_thread.run_sync(self._queue_visibility)
        slots = anyio.CapacityLimiter(max(1, self._settings.worker_concurrency))
        logger.info("worker started", extra={"operation": "worker", "queue_url": self._queue_url})
        async with self.manager:
            async with anyio.create_task_group() as handlers:
                task_status.started()
                await self._receive_loop(handlers, slots)
                with anyio.move_on_after(self._settings.worker_stop_grace_seconds) as grace:
                    if slots.borrowed_tokens:
                        await self._drained.wait()
                if grace.cancelled_caught:
                    logger.warning(
                        "in-flight requests did not finish within the stop grace; abandoning them",
                        extra={"operation": "worker", "in_flight": slots.borrowed_tokens},
                    )
                    handlers.cancel_scope.cancel()
        logger.info("worker stopped", extra={"operation": "worker", "handled": self.handled})

    async def _receive_loop(self, handlers: anyio.abc.TaskGroup, slots: anyio.CapacityLimiter) -> None:
        while not self._stopping.is_set():
            first = object()
            await slots.acquire_on_behalf_of(first)
            count = min(_MAX_BATCH, 1 + int(slots.available_tokens))
            messages: list[MessageTypeDef] = []
            with anyio.CancelScope() as receiving:
                async with anyio.create_task_group() as watch:
                    watch.start_soon(_cancel_when_set, self._stopping, receiving)
                    messages = await self._receive_in_daemon_thread(count)
                    watch.cancel_scope.cancel()
            if not messages:
                slots.release_on_behalf_of(first)
                continue
            for index, message in enumerate(messages):
                borrower = first if index == 0 else object()
                if index:
                    slots.acquire_on_behalf_of_nowait(borrower)
                handlers.start_soon(self._handle_and_release, message, slots, borrower)

    async def _receive_in_daemon_thread(self, count: int) -> list[MessageTypeDef]:
        # A long poll cannot be interrupted. On stop it is abandoned; a daemon thread (unlike anyio's worker
        # threads) never holds up the process exit for the rest of the poll.
        received: list[MessageTypeDef] = []
        done = anyio.Event()
        token = anyio.lowlevel.current_token()

        def poll() -> None:
            try:
                received.extend(self._receive(count))
            finally:
                with contextlib.suppress(anyio.RunFinishedError):
                    anyio.from_thread.run_sync(done.set, token=token)

        threading.Thread(target=poll, name="sqs-receive", daemon=True).start()
        await done.wait()
        return received

    async def _handle_and_release(
        self, message: MessageTypeDef, slots: anyio.CapacityLimiter, borrower: object
    ) -> None:
        try:
            await self.handle(message)
        finally:
            slots.release_on_behalf_of(borrower)
            if self._stopping.is_set() and not slots.borrowed_tokens:
                self._drained.set()

    async def handle(self, message: MessageTypeDef) -> None:
        """Handle one received message end to end (parse, deadline, claim, execute, record, reply, delete)."""
        receipt = message["ReceiptHandle"]
        body = message.get("Body", "")
        try:
            request = Request.from_json(body)
        except InvalidInstallation as exc:
            await self._reject(body, receipt, exc.message)
            return
        fields = _fields(request)
        if request.expired(self._now()):
            logger.info("request expired before it ran", extra=fields)
            await self._finish(request, receipt, _error(request, ReplyError.EXPIRED, _expired_message(request)))
            return
        if request.kind in (RequestKind.CALL_TOOL, RequestKind.READ_RESOURCE):
            try:
                claimed = await anyio.to_thread.run_sync(
                    self._claims.claim, request.request_id, self._settings.claim_ttl_seconds
                )
                recorded = None if claimed else await anyio.to_thread.run_sync(self._claims.outcome, request.request_id)
            except StoreError as exc:
                logger.warning("request not claimed; left for redelivery", extra={**fields, "error": str(exc)})
                return
            if not claimed:
                logger.warning("duplicate request not run again", extra={**fields, "recorded": recorded is not None})
                await self._finish(request, receipt, _duplicate_reply(request, recorded), record=False)
                return
        async with anyio.create_task_group() as group:
            group.start_soon(self._keep_invisible, receipt)
            reply = await self._execute(request)
            group.cancel_scope.cancel()
        self.handled += 1
        await self._finish(
            request, receipt, reply, record=request.kind in (RequestKind.CALL_TOOL, RequestKind.READ_RESOURCE)
        )

    async def _execute(self, request: Request) -> Reply:
        fields = _fields(request)
        remaining = (request.deadline - self._now()).total_seconds()
        try:
            if request.kind is RequestKind.STOP:
                uninstall = bool(request.params.get("uninstall"))
                stopped = await self.manager.stop(request.installation_id, uninstall=uninstall)
                return Reply(request.request_id, result={"stopped": stopped, "uninstalled": uninstall})
            entry = await self._installations.get(request, fresh=request.kind is RequestKind.DISCOVER)
            if request.kind is RequestKind.DISCOVER:
                # The deadline bounds the wait for the answer only: the spawn and discovery go on without it.
                with anyio.move_on_after(max(remaining, 0.0)) as waiting:
                    catalog = await self.manager.discover(entry)
                    return Reply(
                        request.request_id,
                        result={
                            "tools": len(catalog.tools),
                            "resources": len(catalog.resources),
                            "templates": len(catalog.templates),
                        },
                    )
                if waiting.cancelled_caught:
                    return _error(request, ReplyError.UPSTREAM, "discovery did not finish before the deadline")
            with anyio.fail_after(max(remaining, 0.001)):
                if request.kind is RequestKind.CALL_TOOL:
                    name, arguments = _call_params(request)
                    result = await self.manager.call_tool(entry, name, arguments, timeout=remaining)
                else:
                    result = await self.manager.read_resource(entry, _uri_param(request), timeout=remaining)
            return Reply(request.request_id, result=result)
        except InvalidInstallation as exc:
            return _error(request, ReplyError.INVALID, exc.message)
        except (NotFound, Unavailable) as exc:
            logger.info("request refused", extra={**fields, "error": str(exc)})
            return _error(request, ReplyError.UNAVAILABLE, str(exc))
        except UpstreamError as exc:
            logger.info("request failed upstream", extra={**fields, "error": exc.message})
            return _error(request, ReplyError.UPSTREAM, exc.message)
        except StoreError as exc:
            logger.warning("catalog unavailable", extra={**fields, "error": str(exc)})
            return _error(request, ReplyError.UNAVAILABLE, f"the worker could not read the catalog: {exc}")
        except TimeoutError:
            return _error(
                request, ReplyError.UPSTREAM, "the call did not finish before its deadline (it may still complete)"
            )

    async def _finish(self, request: Request, receipt: str, reply: Reply, *, record: bool = False) -> None:
        body = reply.to_json()
        if len(body.encode()) > MAX_REPLY_BYTES:
            reply = _error(
                request,
                ReplyError.UPSTREAM,
                f"the result is {len(body.encode())} bytes, more than a reply can carry ({MAX_REPLY_BYTES} bytes)",
            )
            body = reply.to_json()
        fields = _fields(request)
        if record:
            try:
                await anyio.to_thread.run_sync(self._claims.record_outcome, request.request_id, body)
            except StoreError as exc:
                # The reply still goes out; only a later duplicate loses the recorded answer.
                logger.warning("outcome not recorded", extra={**fields, "error": str(exc)})
        if request.reply_to:
            await anyio.to_thread.run_sync(self._send_reply, request, body)
        await anyio.to_thread.run_sync(self._delete, receipt)
        logger.info("request done", extra={**fields, "ok": reply.ok, "error_kind": str(reply.error_kind or "")})

    async def _reject(self, body: str, receipt: str, message: str) -> None:
        data = _loose_json(body)
        request_id, reply_to = data.get("request_id"), data.get("reply_to")
        if not isinstance(request_id, str) or not isinstance(reply_to, str) or not reply_to:
            logger.warning(
                "malformed request left for the dead-letter queue", extra={"operation": "worker", "error": message}
            )
            return
        reply = Reply(request_id, error_kind=ReplyError.INVALID, error_message=f"malformed request: {message}")
        logger.warning("malformed request rejected", extra={"operation": "worker", "request_id": request_id})
        await anyio.to_thread.run_sync(self._send, reply_to, reply.to_json(), request_id)
        await anyio.to_thread.run_sync(self._delete, receipt)

    async def _keep_invisible(self, receipt: str) -> None:
        # Extend before the visibility timeout runs out, so a long call is not handed to another worker.
        interval = max(1.0, self._visibility / 2)
        while True:
            await anyio.sleep(interval)
            await anyio.to_thread.run_sync(self._extend_visibility, receipt)

    # -- SQS (blocking; run in worker threads) --------------------------------------------------------

    def _queue_visibility(self) -> int:
        try:
            attributes = self._sqs.get_queue_attributes(QueueUrl=self._queue_url, AttributeNames=["VisibilityTimeout"])
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"the request queue {self._queue_url} is unavailable: {exc}") from exc
        return int(attributes.get("Attributes", {}).get("VisibilityTimeout", _DEFAULT_VISIBILITY_SECONDS))

    def _receive(self, count: int) -> list[MessageTypeDef]:
        try:
            response = self._sqs.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=count,
                WaitTimeSeconds=self._wait_time,
                MessageAttributeNames=["All"],
            )
        except (ClientError, BotoCoreError) as exc:
            logger.warning("receive failed", extra={"operation": "receive", "error": str(exc)})
            return []
        return list(response.get("Messages", []))

    def _send_reply(self, request: Request, body: str) -> None:
        assert request.reply_to is not None
        self._send(request.reply_to, body, request.request_id)

    def _send(self, queue_url: str, body: str, correlation_id: str) -> None:
        try:
            self._sqs.send_message(
                QueueUrl=queue_url,
                MessageBody=body,
                MessageAttributes={"correlation_id": {"DataType": "String", "StringValue": correlation_id}},
            )
        except (ClientError, BotoCoreError) as exc:
            # The reply queue may have been swept (its gateway is gone): nobody waits for this reply.
            logger.warning(
                "reply not delivered",
                extra={"operation": "reply", "request_id": correlation_id, "reply_to": queue_url, "error": str(exc)},
            )

    def _delete(self, receipt: str) -> None:
        try:
            self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=receipt)
        except (ClientError, BotoCoreError) as exc:
            logger.warning(
                "message not deleted; it is delivered again", extra={"operation": "delete", "error": str(exc)}
            )

    def _extend_visibility(self, receipt: str) -> None:
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._queue_url, ReceiptHandle=receipt, VisibilityTimeout=self._visibility
            )
        except (ClientError, BotoCoreError) as exc:
            logger.warning("visibility not extended", extra={"operation": "visibility", "error": str(exc)})


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _call_params(request: Request) -> tuple[str, dict[str, Any]]:
    name = request.params.get("name")
    arguments = request.params.get("arguments") or {}
    if not isinstance(name, str) or not name:
        raise InvalidInstallation("params.name", "call_tool needs the tool's name")
    if not isinstance(arguments, dict):
        raise InvalidInstallation("params.arguments", "must be an object")
    return name, arguments


def _uri_param(request: Request) -> str:
    uri = request.params.get("uri")
    if not isinstance(uri, str) or not uri:
        raise InvalidInstallation("params.uri", "read_resource needs the resource's uri")
    return uri


def _duplicate_reply(request: Request, recorded: str | None) -> Reply:
    if recorded is not None:
        try:
            return Reply.from_json(recorded)
        except InvalidInstallation:
            logger.warning("recorded outcome unreadable", extra=_fields(request))
    return _error(
        request,
        ReplyError.DUPLICATE,
        f"request {request.request_id} was already received by a worker and is not run twice; "
        "its outcome is unknown (the first attempt may still be running, or its worker stopped)",
    )


def _expired_message(request: Request) -> str:
    return f"the request's deadline {request.deadline.isoformat()} passed before a worker could run it; it was not run"


def _error(request: Request, kind: ReplyError, message: str) -> Reply:
    return Reply(request.request_id, error_kind=kind, error_message=message)


def _loose_json(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _fields(request: Request) -> dict[str, str]:
    return {
        "operation": str(request.kind),
        "request_id": request.request_id,
        "team_id": request.team_id,
        "installation_id": request.installation_id,
    }


def _utc_now() -> datetime:
    return datetime.now(UTC)
