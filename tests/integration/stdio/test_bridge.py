"""The gateway's stdio bridge against real SQS (moto in server mode), with a tiny responder thread playing the worker.

The responder long-polls the worker request queue and answers each request on the reply queue it names:
``echo`` answers with the arguments it got, ``hold`` is kept unanswered until a later ``echo`` releases it (a late
reply), and ``broken`` answers with a worker error.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from satellite.aws.stdio_bridge import LAST_USED_TAG, SqsStdioBridge, sweep_reply_queues
from satellite.errors import FailureKind, UpstreamError
from satellite.installation import Installation, Transport
from satellite.installations import control_request
from satellite.stdio.messages import Reply, ReplyError, Request, RequestKind
from tests.support.aws import sqs_client, start_moto
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_sqs import SQSClient

pytestmark = pytest.mark.anyio

INSTALLATION = Installation(
    installation_id="i-time", team_id="t1", slug="time", transport=Transport.STDIO, command="mcp-server-time"
)


class Responder:
    """Plays the worker: answers requests from the request queue on their reply queues."""

    def __init__(self, sqs: SQSClient, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.held: list[Request] = []
        self.controls: list[Request] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="responder", daemon=True)

    def __enter__(self) -> Responder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            # Answer each batch in reverse order, so replies never come back in the order of the requests.
            for message in reversed(messages.get("Messages", [])):
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                self._answer(Request.from_json(message["Body"]))

    def _answer(self, request: Request) -> None:
        if request.reply_to is None:
            self.controls.append(request)
            return
        name = request.params.get("name")
        if name == "hold":
            self.held.append(request)
            return
        if name == "broken":
            self._reply(request, Reply(request.request_id, error_kind=ReplyError.UNAVAILABLE, error_message="down"))
            return
        for late in self.held:
            self._reply(late, Reply(late.request_id, result={"content": [{"type": "text", "text": "late"}]}))
        self.held.clear()
        text = json.dumps(request.params.get("arguments", request.params))
        self._reply(request, Reply(request.request_id, result={"content": [{"type": "text", "text": text}]}))

    def _reply(self, request: Request, reply: Reply) -> None:
        assert request.reply_to is not None
        self.sqs.send_message(QueueUrl=request.reply_to, MessageBody=reply.to_json())


@pytest.fixture(scope="module")
def sqs() -> Iterator[SQSClient]:
    with start_moto() as endpoint:
        yield sqs_client(endpoint)


@pytest.fixture(scope="module")
def responder(sqs: SQSClient) -> Iterator[Responder]:
    queue_url = sqs.create_queue(QueueName="worker-requests")["QueueUrl"]
    with Responder(sqs, queue_url) as running:
        yield running


def bridge(sqs: SQSClient, responder: Responder, deadline: float = 10.0, **kwargs: Any) -> SqsStdioBridge:
    prefix = f"reply-{uuid.uuid4().hex[:8]}-"
    return SqsStdioBridge(
        responder.queue_url, client=sqs, reply_queue_prefix=prefix, deadline_seconds=deadline, **kwargs
    )


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def queues(sqs: SQSClient, prefix: str) -> list[str]:
    return list(sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", []))


async def test_twenty_concurrent_calls_each_get_their_own_reply(sqs: SQSClient, responder: Responder) -> None:
    # Given one bridge (one execution environment) and a worker that answers out of order
    stdio = bridge(sqs, responder)
    results: dict[int, str] = {}

    async def call(index: int) -> None:
        results[index] = text(await stdio.call_tool(INSTALLATION, "echo", {"index": index}))

    # When 20 calls run at once
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for index in range(20):
                group.start_soon(call, index)

    # Then every caller got the reply to its own request
    assert results == {index: json.dumps({"index": index}) for index in range(20)}


async def test_a_call_past_its_deadline_times_out_saying_it_may_still_complete(
    sqs: SQSClient, responder: Responder
) -> None:
    # Given a worker that never answers in time
    stdio = bridge(sqs, responder, deadline=1.0)

    # When a call waits past its 1 s deadline
    with anyio.fail_after(10), pytest.raises(UpstreamError) as raised:
        await stdio.call_tool(INSTALLATION, "hold", {})

    # Then it fails as a timeout that says the call may still complete
    assert raised.value.kind is FailureKind.TIMEOUT
    assert "may still complete" in raised.value.message
    assert "'time'" in raised.value.message


async def test_a_late_reply_is_dropped_and_never_reaches_a_later_caller(
    sqs: SQSClient, responder: Responder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a call that timed out while the worker held it
    caplog.set_level(logging.INFO, logger="satellite.aws.stdio_bridge")
    stdio = bridge(sqs, responder, deadline=1.0)
    with anyio.fail_after(10), pytest.raises(UpstreamError):
        await stdio.call_tool(INSTALLATION, "hold", {})
    # When the worker sends the late reply right before answering a later call on the same reply queue
    with anyio.fail_after(10):
        result = await stdio.call_tool(INSTALLATION, "echo", {"later": True})

    # Then the later caller gets its own answer, and the late reply is dropped and deleted from the queue
    assert text(result) == json.dumps({"later": True})
    reply_url = stdio.reply_queue_url
    assert reply_url is not None

    # (moto delivers in order, so the late reply is received no later than the round that brought the answer)
    assert "late or unknown reply dropped" in caplog.text

    def drained() -> bool:
        attributes = sqs.get_queue_attributes(
            QueueUrl=reply_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return attributes == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}

    eventually(drained, "the late reply is deleted from the reply queue", timeout=10)


async def test_the_reply_queue_is_created_once_and_reused(sqs: SQSClient, responder: Responder) -> None:
    # Given a fresh bridge with no reply queue yet
    stdio = bridge(sqs, responder)
    assert stdio.reply_queue_url is None

    # When it makes sequential and concurrent calls
    with anyio.fail_after(30):
        for index in range(3):
            await stdio.read_resource(INSTALLATION, f"file:///{index}")
        async with anyio.create_task_group() as group:
            for index in range(5):
                group.start_soon(stdio.call_tool, INSTALLATION, "echo", {"i": index})

    # Then exactly one reply queue exists, tagged with its last use, and the worker saw the read requests
    prefix = stdio.reply_queue_url.rsplit("/", 1)[-1][:-32] if stdio.reply_queue_url else ""
    assert stdio.reply_queues_created == 1
    assert queues(sqs, prefix) == [stdio.reply_queue_url]
    tags = sqs.list_queue_tags(QueueUrl=str(stdio.reply_queue_url))["Tags"]
    assert abs(float(tags[LAST_USED_TAG]) - datetime.now(UTC).timestamp()) < 60


async def test_a_worker_error_reply_becomes_an_upstream_error(sqs: SQSClient, responder: Responder) -> None:
    # Given a worker that reports the server as unavailable
    stdio = bridge(sqs, responder)

    # When a call is answered with that error
    with anyio.fail_after(10), pytest.raises(UpstreamError) as raised:
        await stdio.call_tool(INSTALLATION, "broken", {})

    # Then the caller sees it as an unreachable upstream with the worker's message
    assert raised.value.kind is FailureKind.UNREACHABLE
    assert raised.value.message == "time: down"


async def test_control_requests_carry_no_reply_queue(sqs: SQSClient, responder: Responder) -> None:
    # Given a bridge
    stdio = bridge(sqs, responder)

    # When a discover request is sent
    request = control_request(INSTALLATION, RequestKind.DISCOVER, datetime.now(UTC))
    stdio.send_control(request)

    # Then the worker receives it without a reply queue, for this installation and configuration
    received = eventually(
        lambda: [r for r in responder.controls if r.request_id == request.request_id], "the worker gets it"
    )
    assert received[0].reply_to is None
    assert (received[0].installation_id, received[0].config_hash) == ("i-time", INSTALLATION.config_hash)
    assert stdio.reply_queue_url is None


async def test_a_swept_reply_queue_is_replaced_before_the_next_request(sqs: SQSClient, responder: Responder) -> None:
    # Given a bridge whose reply queue was swept while its environment was idle past the tag refresh interval
    now = [datetime.now(UTC).timestamp()]
    stdio = bridge(sqs, responder, tag_refresh_seconds=60, clock=lambda: now[0])
    with anyio.fail_after(10):
        await stdio.call_tool(INSTALLATION, "echo", {"first": 1})
    first = stdio.reply_queue_url
    assert first is not None
    sqs.delete_queue(QueueUrl=first)
    now[0] += 120

    # When it makes the next call
    with anyio.fail_after(10):
        result = await stdio.call_tool(INSTALLATION, "echo", {"second": 2})

    # Then it created a new reply queue first and the call succeeded
    assert text(result) == json.dumps({"second": 2})
    assert stdio.reply_queue_url not in (None, first)
    assert stdio.reply_queues_created == 2


def test_the_sweeper_deletes_stale_reply_queues_only(sqs: SQSClient) -> None:
    # Given reply queues used two hours and ten seconds ago, an untagged new one, and a stale queue of another prefix
    now = datetime.now(UTC)
    prefix = f"sweep-{uuid.uuid4().hex[:8]}-"

    def create(name: str, age: float | None) -> str:
        tags = {} if age is None else {LAST_USED_TAG: str(int(now.timestamp() - age))}
        return sqs.create_queue(QueueName=name, tags=tags)["QueueUrl"]

    stale = create(f"{prefix}stale", 7200)
    fresh = create(f"{prefix}fresh", 10)
    untagged = create(f"{prefix}untagged", None)
    other = create(f"other-{uuid.uuid4().hex[:8]}", 7200)

    # When the sweeper runs with a one-hour threshold
    deleted = sweep_reply_queues(sqs, prefix, 3600, now)

    # Then only the stale queue with the prefix is gone
    assert deleted == [stale]
    assert sorted(queues(sqs, prefix)) == sorted([fresh, untagged])
    assert queues(sqs, other.rsplit("/", 1)[-1]) == [other]
