"""The worker end to end: requests on a real SQS queue (moto), real stdio servers, replies on reply queues."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from satellite.aws.claims_store import DynamoClaimsStore
from satellite.stdio.messages import Reply, ReplyError, Request, RequestKind
from satellite.stdio.process import process_group_alive
from satellite.stdio.worker import Worker
from tests.integration.stdio.conftest import (
    CATALOG_TABLE,
    CLAIMS_TABLE,
    everything,
    installed,
    memory,
    worker_settings,
)
from tests.support.aws import REGION
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from satellite.aws.catalog_store import DynamoCatalogStore
    from satellite.installation import Installation

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[3]


def make_queue(sqs: SQSClient, prefix: str, visibility: int = 30) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(visibility)})["QueueUrl"]


def request(
    installation: Installation,
    kind: RequestKind,
    params: dict[str, Any],
    reply_to: str | None,
    deadline_seconds: float = 20.0,
) -> Request:
    return Request(
        request_id=str(uuid.uuid4()),
        kind=kind,
        team_id=installation.team_id,
        installation_id=installation.installation_id,
        config_hash=installation.config_hash,
        deadline=datetime.now(UTC) + timedelta(seconds=deadline_seconds),
        params=params,
        reply_to=reply_to,
    )


def call(installation: Installation, name: str, arguments: dict[str, Any], reply_to: str) -> Request:
    return request(installation, RequestKind.CALL_TOOL, {"name": name, "arguments": arguments}, reply_to)


def send(sqs: SQSClient, queue_url: str, *requests: Request) -> None:
    for item in requests:
        sqs.send_message(QueueUrl=queue_url, MessageBody=item.to_json())


def replies(sqs: SQSClient, reply_queue: str, count: int, timeout: float = 30.0) -> list[tuple[Reply, str]]:
    """``count`` replies from ``reply_queue`` with their ``correlation_id`` attribute (bounded wait)."""
    received: list[tuple[Reply, str]] = []

    def more() -> bool:
        response = sqs.receive_message(
            QueueUrl=reply_queue, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageAttributeNames=["All"]
        )
        for message in response.get("Messages", []):
            attribute = message.get("MessageAttributes", {}).get("correlation_id", {}).get("StringValue", "")
            received.append((Reply.from_json(message["Body"]), attribute))
            sqs.delete_message(QueueUrl=reply_queue, ReceiptHandle=message["ReceiptHandle"])
        return len(received) >= count

    eventually(more, f"{count} replies on {reply_queue}", timeout)
    return received


def text(reply: Reply) -> str:
    assert reply.ok, reply.error_message
    assert reply.result is not None
    return "".join(str(part.get("text", "")) for part in reply.result["content"])


@pytest.fixture
def request_queue(sqs: SQSClient) -> str:
    return make_queue(sqs, "worker-requests")


@pytest.fixture
def claims(dynamodb: DynamoDBClient) -> DynamoClaimsStore:
    return DynamoClaimsStore(CLAIMS_TABLE, dynamodb)


@pytest.fixture
async def worker(
    sqs: SQSClient, claims: DynamoClaimsStore, store: DynamoCatalogStore, request_queue: str, tmp_path: Path
) -> AsyncIterator[Worker]:
    settings = worker_settings(tmp_path / "root", worker_queue_url=request_queue, worker_concurrency=32)
    running = Worker(settings, sqs, claims, store, wait_time_seconds=1)
    async with anyio.create_task_group() as group:
        await group.start(running.run)
        yield running
        running.stop()


async def in_thread(function: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(function, *args)


async def test_a_call_round_trips_with_its_correlation_id(
    worker: Worker, sqs: SQSClient, store: DynamoCatalogStore, request_queue: str, team_id: str
) -> None:
    # Given a stdio installation and a caller's reply queue
    installation = installed(store, everything(team_id)).installation
    reply_queue = make_queue(sqs, "reply")
    echo = call(installation, "echo", {"message": "round trip"}, reply_queue)

    # When the caller sends a call_tool request
    send(sqs, request_queue, echo)
    ((reply, attribute),) = await in_thread(replies, sqs, reply_queue, 1)

    # Then the reply carries the result and the request id as correlation id (body and attribute)
    assert reply.correlation_id == echo.request_id and attribute == echo.request_id
    assert "round trip" in text(reply)


async def test_twenty_concurrent_calls_over_three_servers_reach_the_right_callers(
    worker: Worker, sqs: SQSClient, store: DynamoCatalogStore, request_queue: str, team_id: str, tmp_path: Path
) -> None:
    # Given three stdio servers (server-everything twice, server-memory) and four callers
    servers = [
        installed(store, everything(team_id, slug="alpha")).installation,
        installed(store, everything(team_id, slug="beta")).installation,
        installed(store, memory(team_id, tmp_path)).installation,
    ]
    callers = [make_queue(sqs, f"caller{index}") for index in range(4)]
    sent: dict[str, tuple[str, str]] = {}
    requests = []
    for index in range(20):
        server = servers[index % 3]
        token = f"token-{index}-{uuid.uuid4().hex[:6]}"
        reply_to = callers[index % 4]
        if server.slug == "memory":
            item = call(
                server,
                "create_entities",
                {"entities": [{"name": token, "entityType": "t", "observations": []}]},
                reply_to,
            )
        else:
            item = call(server, "echo", {"message": token}, reply_to)
        sent[item.request_id] = (reply_to, token)
        requests.append(item)

    # When all twenty are sent at once
    send(sqs, request_queue, *requests)
    received = {queue: await in_thread(replies, sqs, queue, 5) for queue in callers}

    # Then every caller got exactly its own five replies, each with its own request's result
    for queue, answers in received.items():
        assert len(answers) == 5
        for reply, attribute in answers:
            expected_queue, token = sent[reply.correlation_id]
            assert expected_queue == queue and attribute == reply.correlation_id
            assert token in text(reply)
    assert {info.installation_id for info in worker.manager.servers()} == {s.installation_id for s in servers}


async def test_a_request_past_its_deadline_is_answered_expired_and_never_run(
    worker: Worker, sqs: SQSClient, store: DynamoCatalogStore, request_queue: str, team_id: str, tmp_path: Path
) -> None:
    # Given a side-effecting call whose deadline has already passed
    installation = installed(store, memory(team_id, tmp_path)).installation
    reply_queue = make_queue(sqs, "reply")
    late = request(
        installation,
        RequestKind.CALL_TOOL,
        {"name": "create_entities", "arguments": {"entities": [{"name": "x", "entityType": "t", "observations": []}]}},
        reply_queue,
        deadline_seconds=-1,
    )

    # When it reaches the worker
    send(sqs, request_queue, late)
    ((reply, _),) = await in_thread(replies, sqs, reply_queue, 1)

    # Then it is answered "expired" and the server was never even started
    assert reply.error_kind is ReplyError.EXPIRED and "was not run" in (reply.error_message or "")
    assert worker.manager.server(installation.installation_id) is None


async def test_a_discover_request_spawns_and_discovers_at_once(
    worker: Worker, sqs: SQSClient, store: DynamoCatalogStore, request_queue: str, team_id: str
) -> None:
    # Given a freshly added installation with nothing discovered
    installation = installed(store, everything(team_id)).installation

    # When the installations API sends a discover request (no reply queue)
    send(sqs, request_queue, request(installation, RequestKind.DISCOVER, {}, None))

    # Then its tools appear in the catalog within seconds
    def discovered() -> bool:
        catalog = store.load_catalog(team_id)
        return bool(catalog.installations and catalog.installations[0].tools)

    await in_thread(eventually, discovered, "tools discovered", 15.0)


# -- the worker as a process: SIGKILL mid-call, SIGTERM ---------------------------------------------------


@contextmanager
def worker_process(moto_endpoint: str, queue_url: str, root: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m workers.worker`` against moto; killed (with its children's groups) at exit."""
    environment = {
        "PATH": os.environ["PATH"],
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "SATELLITE_WORKER_QUEUE_URL": queue_url,
        "SATELLITE_CATALOG_TABLE": CATALOG_TABLE,
        "SATELLITE_CLAIMS_TABLE": CLAIMS_TABLE,
        "SATELLITE_WORKER_ROOT": str(root),
        "SATELLITE_WORKER_STOP_GRACE_SECONDS": "15",
    }
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "workers.worker"], cwd=REPO_ROOT, env=environment, stdout=output, stderr=output
        )
    try:
        yield process
    finally:
        groups = child_groups(process.pid)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for group in groups:
            kill_group(group)


def child_groups(parent: int) -> list[int]:
    """The process groups of ``parent``'s direct children (each stdio server leads its own)."""
    groups = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            groups.append(int(fields[2]))
    return groups


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def open_when_read(fifo: Path) -> int:
    """A write end of ``fifo``, once a reader has it open (polled without blocking)."""

    def attempt() -> int | None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            return None

    return int(eventually(attempt, f"a reader opened {fifo}", 15.0))


async def test_a_redelivered_call_after_the_worker_was_killed_mid_call_never_runs_twice(
    moto_endpoint: str, sqs: SQSClient, store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a worker process and server-memory whose graph file is a FIFO: a call blocks reading it, mid-call
    queue = make_queue(sqs, "worker-requests", visibility=2)
    installation = installed(store, memory(team_id, tmp_path)).installation
    graph_file = tmp_path / "memory.jsonl"
    os.mkfifo(graph_file)
    reply_queue = make_queue(sqs, "reply")
    log = tmp_path / "worker.log"
    entity = f"entity-{uuid.uuid4().hex[:8]}"
    arguments = {"entities": [{"name": entity, "entityType": "t", "observations": []}]}
    create = call(installation, "create_entities", arguments, reply_queue)
    with worker_process(moto_endpoint, queue, tmp_path / "root", log) as first:
        send(sqs, queue, create)
        writer = await in_thread(open_when_read, graph_file)
        (server_group,) = child_groups(first.pid)

        # When the worker is killed in the middle of create_entities, and the server then completes it
        first.kill()
        first.wait(timeout=10)
        os.close(writer)
        await in_thread(eventually, lambda: graph_file.is_file() and entity in graph_file.read_text(), "entity saved")
        kill_group(server_group)

    # And a new worker receives the redelivered message
    with worker_process(moto_endpoint, queue, tmp_path / "root", log):
        ((duplicate, _),) = await in_thread(replies, sqs, reply_queue, 1)

        # Then the duplicate is not run again: it gets a clear "duplicate" error
        assert duplicate.correlation_id == create.request_id
        assert duplicate.error_kind is ReplyError.DUPLICATE and "not run twice" in (duplicate.error_message or "")

        # And the entity exists exactly once
        send(sqs, queue, call(installation, "read_graph", {}, reply_queue))
        ((graph, _),) = await in_thread(replies, sqs, reply_queue, 1)
        names = [node["name"] for node in json.loads(text(graph))["entities"]]
        assert names.count(entity) == 1


async def test_a_duplicate_of_a_finished_call_gets_the_recorded_reply(
    worker: Worker, sqs: SQSClient, store: DynamoCatalogStore, request_queue: str, team_id: str, tmp_path: Path
) -> None:
    # Given a side-effecting call that ran and was answered
    installation = installed(store, memory(team_id, tmp_path)).installation
    reply_queue = make_queue(sqs, "reply")
    arguments = {"entities": [{"name": "once", "entityType": "t", "observations": []}]}
    create = call(installation, "create_entities", arguments, reply_queue)
    send(sqs, request_queue, create)
    ((first, _),) = await in_thread(replies, sqs, reply_queue, 1)

    # When the same request arrives again
    send(sqs, request_queue, create)
    ((second, _),) = await in_thread(replies, sqs, reply_queue, 1)

    # Then it gets the recorded reply, and the tool ran once
    assert second == first and first.ok
    send(sqs, request_queue, call(installation, "read_graph", {}, reply_queue))
    ((graph, _),) = await in_thread(replies, sqs, reply_queue, 1)
    assert [node["name"] for node in json.loads(text(graph))["entities"]] == ["once"]


async def test_sigterm_finishes_the_call_in_flight_and_stops_every_child(
    moto_endpoint: str,
    sqs: SQSClient,
    store: DynamoCatalogStore,
    team_id: str,
    tmp_path: Path,
) -> None:
    # Given a worker process running a two-second call
    queue = make_queue(sqs, "worker-requests")
    installation = installed(store, everything(team_id)).installation
    reply_queue = make_queue(sqs, "reply")
    slow = call(installation, "trigger-long-running-operation", {"duration": 2, "steps": 2}, reply_queue)
    with worker_process(moto_endpoint, queue, tmp_path / "root", tmp_path / "worker.log") as process:
        send(sqs, queue, slow)
        groups = await in_thread(eventually, lambda: child_groups(process.pid), "server spawned", 20.0)

        # When it receives SIGTERM
        process.send_signal(signal.SIGTERM)

        # Then the call in flight still completes and is answered
        ((reply, _),) = await in_thread(replies, sqs, reply_queue, 1)
        assert reply.correlation_id == slow.request_id and "Long running operation completed" in text(reply)

        # And the worker exits cleanly with every child process group stopped
        assert await in_thread(process.wait, 20) == 0
        assert not any(process_group_alive(group) for group in groups)
