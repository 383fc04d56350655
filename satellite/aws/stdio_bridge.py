"""The gateway's side of stdio calls: requests on the worker queue, replies on this environment's reply queue.

**Reply queue.** Each gateway execution environment owns one reply queue, named ``<prefix><random id>`` and
created lazily on the first call; it lives as long as the :class:`SqsStdioBridge` (built once per process, so it
survives warm Lambda invocations). Its tag ``satellite:last-used`` (epoch seconds) is refreshed at most every
``tag_refresh_seconds``, before a request is sent; :func:`sweep_reply_queues` deletes queues whose tag is older than
the stale threshold. A thawed environment whose queue was swept meanwhile finds out when it refreshes the tag and
creates a new queue before it sends anything.

**Waiting.** A call registers a waiter under its correlation id (the request id), sends the request and waits.
There is no background consumer task: under Mangum the event loop is reused but frozen between invocations, so
a task could be suspended at any point. Instead, whichever waiting call finds no receive in progress runs one
long-poll *round* itself (bounded by its own deadline), hands every reply received to the waiter with its
correlation id, deletes every message it received (in a background thread, off the callers' path), and lets the
next waiter take over. Replies whose correlation
id has no waiter (late, or meant for a previous process) are dropped. Correlation ids are random, so a late reply
can never reach a later caller. Past the deadline the caller gets ``UpstreamError(TIMEOUT)`` saying the call may
still complete on the server: the worker may already be running it, and a tool call is never retried.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from satellite.errors import FailureKind, InvalidInstallation, StoreError, UpstreamError
from satellite.stdio.messages import Reply, ReplyError, Request, RequestKind

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mypy_boto3_sqs import SQSClient

    from satellite.config import Settings
    from satellite.installation import Installation

__all__ = ["LAST_USED_TAG", "SqsStdioBridge", "sweep_reply_queues"]

logger = logging.getLogger(__name__)

LAST_USED_TAG = "satellite:last-used"
# SQS's longest long poll.
MAX_WAIT_SECONDS = 20
# A reply older than this is useless (every deadline is below 30 s); SQS's shortest retention is 60 s.
REPLY_RETENTION_SECONDS = 300
# Only this environment reads its reply queue and it deletes whatever it receives at once.
REPLY_VISIBILITY_SECONDS = 30
_QUEUE_GONE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
_ERROR_KINDS = {
    ReplyError.EXPIRED: FailureKind.TIMEOUT,
    ReplyError.UNAVAILABLE: FailureKind.UNREACHABLE,
    ReplyError.UPSTREAM: FailureKind.PROTOCOL,
    ReplyError.DUPLICATE: FailureKind.PROTOCOL,
    ReplyError.INVALID: FailureKind.PROTOCOL,
}


@dataclass(eq=False, slots=True)
class _Waiter:
    queue_url: str
    reply: Reply | None = None


@dataclass(eq=False, slots=True)
class _Round:
    """One receive in progress; ``finished`` is set once its replies were handed out."""

    finished: anyio.Event = field(default_factory=anyio.Event)


class SqsStdioBridge:
    """:class:`satellite.ports.Upstream` for stdio installations, through the worker request queue.

    Args:
        queue_url: the worker request queue (``WorkerRequestQueue`` in template.yaml).
        client: a low-level SQS client; by default one is created here (it honours ``AWS_ENDPOINT_URL``).
        reply_queue_prefix: name prefix of reply queues (the IAM policies grant access by it).
        deadline_seconds: how long a call waits for its reply; below API Gateway's 30 s.
        tag_refresh_seconds: how often the reply queue's last-use tag is refreshed (well below the sweeper's
            stale threshold).
        clock: wall-clock seconds (deadlines in requests, last-use tags).
    """

    def __init__(
        self,
        queue_url: str,
        *,
        client: SQSClient | None = None,
        reply_queue_prefix: str = "satellite-reply-",
        deadline_seconds: float = 25.0,
        tag_refresh_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._queue_url = queue_url
        self._client: SQSClient = client or boto3.client("sqs", config=Config(max_pool_connections=64))
        self._prefix = reply_queue_prefix
        self._deadline_seconds = deadline_seconds
        self._tag_refresh_seconds = tag_refresh_seconds
        self._clock = clock
        self._create_lock = threading.Lock()
        self._reply_url: str | None = None
        self._tagged_at = -math.inf
        self._waiters: dict[str, _Waiter] = {}
        self._round: _Round | None = None
        self._queues_created = 0
        self._deletes: ThreadPoolExecutor | None = None

    @classmethod
    def from_settings(cls, settings: Settings, client: SQSClient | None = None) -> SqsStdioBridge:
        """A bridge on ``settings.worker_queue_url`` with the configured prefix and deadline."""
        return cls(
            settings.worker_queue_url,
            client=client,
            reply_queue_prefix=settings.reply_queue_prefix,
            deadline_seconds=settings.stdio_deadline_seconds,
            tag_refresh_seconds=min(300.0, settings.reply_queue_stale_seconds / 4),
        )

    @property
    def reply_queue_url(self) -> str | None:
        """This environment's reply queue, once created."""
        return self._reply_url

    @property
    def reply_queues_created(self) -> int:
        """How many reply queues this bridge created (one, unless a sweeper deleted it meanwhile)."""
        return self._queues_created

    async def call_tool(self, installation: Installation, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``tools/call`` on a worker and return the server's result unchanged (an ``isError`` one included).

        Raises:
            UpstreamError: the request could not be queued (``unreachable``), no reply came before the deadline
                (``timeout``; the call may still complete), or the worker answered with an error.
        """
        params = {"name": name, "arguments": dict(arguments)}
        return await self._call(installation, RequestKind.CALL_TOOL, params)

    async def read_resource(self, installation: Installation, uri: str) -> dict[str, Any]:
        """Run ``resources/read`` on a worker and return the server's result unchanged.

        Raises:
            UpstreamError: as :meth:`call_tool`.
        """
        return await self._call(installation, RequestKind.READ_RESOURCE, {"uri": uri})

    def send_control(self, request: Request) -> None:
        """Send a fire-and-forget request (``discover``, ``stop``; see ``satellite.installations.control_request``).

        Raises:
            StoreError: SQS refused the message.
        """
        try:
            self._client.send_message(QueueUrl=self._queue_url, MessageBody=request.to_json())
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"cannot send the {request.kind} request to the workers: {_describe(exc)}") from exc
        logger.info(
            "worker control request sent",
            extra={
                "operation": "send_control",
                "kind": str(request.kind),
                "installation_id": request.installation_id,
                "request_id": request.request_id,
            },
        )

    async def _call(self, installation: Installation, kind: RequestKind, params: dict[str, Any]) -> dict[str, Any]:
        seconds = self._deadline_seconds
        if installation.timeout_seconds is not None:
            seconds = min(seconds, installation.timeout_seconds)
        started = anyio.current_time()
        reply_url = self._reply_url
        if reply_url is None or self._clock() - self._tagged_at >= self._tag_refresh_seconds:
            reply_url = await anyio.to_thread.run_sync(self._ensure_reply_queue)
        request = Request(
            request_id=uuid.uuid4().hex,
            kind=kind,
            team_id=installation.team_id,
            installation_id=installation.installation_id,
            config_hash=installation.config_hash,
            deadline=datetime.fromtimestamp(self._clock(), UTC) + timedelta(seconds=seconds),
            params=params,
            reply_to=reply_url,
        )
        waiter = _Waiter(reply_url)
        self._waiters[request.request_id] = waiter
        try:
            await anyio.to_thread.run_sync(self._send, request)
            reply = await self._wait(request.request_id, waiter, started + seconds)
        finally:
            del self._waiters[request.request_id]
        if reply is None:
            logger.warning(
                "stdio call timed out",
                extra={"operation": str(kind), "installation_id": installation.installation_id, "seconds": seconds},
            )
            raise UpstreamError(
                FailureKind.TIMEOUT,
                f"the call to {installation.slug!r} timed out after {seconds:g} s waiting for its stdio worker; "
                "it may still complete on the server, so check before repeating a call with side effects",
            )
        if reply.ok:
            return reply.result or {}
        kind_of_failure = _ERROR_KINDS.get(reply.error_kind or ReplyError.UPSTREAM, FailureKind.PROTOCOL)
        raise UpstreamError(kind_of_failure, f"{installation.slug}: {reply.error_message or reply.error_kind}")

    async def _wait(self, correlation_id: str, waiter: _Waiter, deadline: float) -> Reply | None:
        """Wait for the reply, running receive rounds whenever nobody else is; ``None`` past ``deadline``."""
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            while waiter.reply is None:
                if waiter.queue_url != self._reply_url:
                    raise UpstreamError(
                        FailureKind.UNREACHABLE,
                        "the reply queue was deleted while the call was waiting; the call may still complete",
                    )
                # The shielded round below is no cancellation point: take the deadline here, between rounds.
                await anyio.lowlevel.checkpoint_if_cancelled()
                current = self._round
                if current is None:
                    await self._receive_round(deadline)
                else:
                    await current.finished.wait()
        return waiter.reply

    async def _receive_round(self, deadline: float) -> None:
        reply_url = self._reply_url
        assert reply_url is not None
        current = _Round()
        self._round = current
        # Never longer than the caller may wait (rounded up to SQS's whole seconds), so a round ends with its caller.
        wait = max(1, min(MAX_WAIT_SECONDS, math.ceil(deadline - anyio.current_time())))
        try:
            # Shielded: messages received by an abandoned round would be lost until their visibility timeout.
            with anyio.CancelScope(shield=True):
                messages = await anyio.to_thread.run_sync(self._receive, reply_url, wait)
                self._dispatch(messages)
                if messages:
                    # Off the callers' path: a reply is handed out before its deletion, which only has to happen
                    # before the visibility timeout (an undeleted one would come back and be dropped as unknown).
                    self._deleter().submit(self._delete, reply_url, messages)
        finally:
            self._round = None
            current.finished.set()

    def _deleter(self) -> ThreadPoolExecutor:
        if self._deletes is None:
            self._deletes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reply-deletes")
        return self._deletes

    def _dispatch(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            try:
                reply = Reply.from_json(str(message.get("Body", "")))
            except InvalidInstallation as exc:
                logger.warning("malformed reply dropped", extra={"operation": "receive_reply", "error": str(exc)})
                continue
            waiter = self._waiters.get(reply.correlation_id)
            if waiter is None or waiter.reply is not None:
                logger.info(
                    "late or unknown reply dropped",
                    extra={"operation": "receive_reply", "correlation_id": reply.correlation_id},
                )
                continue
            waiter.reply = reply

    # --- blocking SQS calls (run in worker threads) ---------------------------------------------------------

    def _ensure_reply_queue(self) -> str:
        with self._create_lock:
            now = self._clock()
            url = self._reply_url
            if url is not None and now - self._tagged_at < self._tag_refresh_seconds:
                return url
            if url is not None:
                try:
                    self._client.tag_queue(QueueUrl=url, Tags={LAST_USED_TAG: str(int(now))})
                    self._tagged_at = now
                    return url
                except ClientError as exc:
                    if _code(exc) not in _QUEUE_GONE:
                        raise _unreachable("cannot refresh the reply queue", exc) from exc
                    logger.warning("reply queue was swept; creating another", extra={"operation": "reply_queue"})
                except BotoCoreError as exc:
                    raise _unreachable("cannot refresh the reply queue", exc) from exc
            name = f"{self._prefix}{uuid.uuid4().hex}"
            try:
                url = self._client.create_queue(
                    QueueName=name,
                    Attributes={
                        "MessageRetentionPeriod": str(REPLY_RETENTION_SECONDS),
                        "VisibilityTimeout": str(REPLY_VISIBILITY_SECONDS),
                        "SqsManagedSseEnabled": "true",
                    },
                    tags={LAST_USED_TAG: str(int(now))},
                )["QueueUrl"]
            except (ClientError, BotoCoreError) as exc:
                raise _unreachable("cannot create the reply queue", exc) from exc
            self._reply_url = url
            self._tagged_at = now
            self._queues_created += 1
            logger.info("reply queue created", extra={"operation": "reply_queue", "queue": name})
            return url

    def _send(self, request: Request) -> None:
        try:
            self._client.send_message(QueueUrl=self._queue_url, MessageBody=request.to_json())
        except (ClientError, BotoCoreError) as exc:
            raise _unreachable("cannot queue the request for a stdio worker", exc) from exc

    def _receive(self, reply_url: str, wait: int) -> list[dict[str, Any]]:
        try:
            response = self._client.receive_message(QueueUrl=reply_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait)
        except ClientError as exc:
            if _code(exc) in _QUEUE_GONE and self._reply_url == reply_url:
                # The sweeper deleted it: the next call creates another; waiters on this one fail.
                self._reply_url = None
            raise _unreachable("cannot receive replies", exc) from exc
        except BotoCoreError as exc:
            raise _unreachable("cannot receive replies", exc) from exc
        return [dict(message) for message in response.get("Messages", [])]

    def _delete(self, reply_url: str, messages: list[dict[str, Any]]) -> None:
        entries = [{"Id": str(index), "ReceiptHandle": m["ReceiptHandle"]} for index, m in enumerate(messages)]
        # The top of a pool thread: nobody waits for this result, so every failure is logged here.
        try:
            self._client.delete_message_batch(QueueUrl=reply_url, Entries=entries)  # type: ignore[arg-type]
        except (ClientError, BotoCoreError) as exc:
            # Undeleted replies come back after the visibility timeout and are dropped as unknown then.
            logger.warning("replies not deleted", extra={"operation": "receive_reply", "error": _describe(exc)})


def sweep_reply_queues(sqs: SQSClient, prefix: str, stale_seconds: float, now: datetime) -> list[str]:
    """Delete the reply queues named ``prefix*`` whose last use is older than ``stale_seconds``.

    The last use is the queue's ``satellite:last-used`` tag; a queue without one counts from its creation.

    Returns:
        The URLs of the deleted queues.

    Raises:
        StoreError: the queues could not be listed (a queue that vanished meanwhile is skipped).
    """
    threshold = now.timestamp() - stale_seconds
    deleted: list[str] = []
    for url in _list_queues(sqs, prefix):
        try:
            last_used = _last_used(sqs, url)
            if last_used is None or last_used >= threshold:
                continue
            sqs.delete_queue(QueueUrl=url)
        except ClientError as exc:
            if _code(exc) in _QUEUE_GONE:
                continue
            raise StoreError(f"cannot sweep reply queue {url}: {_describe(exc)}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot sweep reply queue {url}: {_describe(exc)}") from exc
        deleted.append(url)
        logger.info("stale reply queue deleted", extra={"operation": "sweep_reply_queues", "queue": url})
    return deleted


def _list_queues(sqs: SQSClient, prefix: str) -> list[str]:
    urls: list[str] = []
    request: dict[str, Any] = {"QueueNamePrefix": prefix, "MaxResults": 1000}
    try:
        while True:
            response = sqs.list_queues(**request)
            urls.extend(response.get("QueueUrls", []))
            token = response.get("NextToken")
            if not token:
                return urls
            request["NextToken"] = token
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot list reply queues: {_describe(exc)}") from exc


def _last_used(sqs: SQSClient, url: str) -> float | None:
    tags = sqs.list_queue_tags(QueueUrl=url).get("Tags", {})
    tagged = tags.get(LAST_USED_TAG)
    if tagged is not None:
        try:
            return float(tagged)
        except ValueError:
            logger.warning("unreadable last-use tag", extra={"operation": "sweep_reply_queues", "queue": url})
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["CreatedTimestamp"]).get("Attributes", {})
    created = attributes.get("CreatedTimestamp")
    return float(created) if created is not None else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _describe(exc: ClientError | BotoCoreError) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', '')}: {error.get('Message', '')}"
    return str(exc)


def _unreachable(what: str, exc: ClientError | BotoCoreError) -> UpstreamError:
    return UpstreamError(FailureKind.UNREACHABLE, f"{what}: {_describe(exc)}")


class ReplyQueueSweeper:
    """Sweeps stale reply queues on each call; the rediscovery schedule calls it (see ``sweep_reply_queues``)."""

    def __init__(self, prefix: str, stale_seconds: float, client: SQSClient | None = None) -> None:
        self._sqs: SQSClient = client or boto3.client("sqs")
        self._prefix = prefix
        self._stale_seconds = stale_seconds

    def __call__(self) -> list[str]:
        return sweep_reply_queues(self._sqs, self._prefix, self._stale_seconds, datetime.now(UTC))
