"""The discovery consumer end to end: moto (DynamoDB + SQS), real upstream MCP servers, the real router.

Requests travel through a real SQS queue: the test receives them and hands them to the consumer as the Lambda
event source mapping would, deleting what the consumer did not report as failed.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.discovery_queue import SqsDiscoveryQueue
from satellite.aws.tables import create_tables
from satellite.catalog import DiscoveryState, ErrorClass, Status
from satellite.config import Identity, Settings
from satellite.discovery_consumer import DiscoveryConsumer
from satellite.discovery_jobs import DiscoveryReason, DiscoveryRequest
from satellite.discovery_service import DiscoveryService
from satellite.errors import StoreError, Unavailable
from satellite.installation import Installation, Transport
from satellite.local.pollers import scheduled_event
from satellite.local.processes import free_port
from satellite.router import Router
from satellite.upstream import RemoteUpstream
from tests.support.aws import REGION, dynamodb_client, sqs_client, start_dynamodb_local, start_moto
from tests.support.upstreams import ScriptedServer, start_everything, start_scripted

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from satellite.catalog import DiscoveredCatalog, InstallationStatus

pytestmark = pytest.mark.anyio

EVERYTHING_TOOLS = 13
TWO_HOURS = timedelta(hours=2)
TOOLS = [
    {"name": "search", "description": "Search things", "inputSchema": {"type": "object"}},
    {"name": "fetch", "description": "Fetch a thing", "inputSchema": {"type": "object"}},
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Endpoints:
    dynamodb: str
    sqs: str


class Clock:
    """The real clock, shifted by ``offset`` (tests move it forward to age caches without waiting)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


class RecordingEvents:
    """The event publisher's twin: records what would have been published."""

    def __init__(self) -> None:
        self.published: list[tuple[str, int]] = []

    def publish_tools_discovered(self, installation: Installation, discovered: DiscoveredCatalog) -> None:
        self.published.append((installation.installation_id, len(discovered.tools)))


class RecordingStore(DynamoCatalogStore):
    """The real store, recording each installation's stored status after every discovery write."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history: dict[str, list[InstallationStatus]] = {}
        self._lock = threading.Lock()

    def claim_discovery(self, team_id: str, installation_id: str, config_hash: str, **kwargs: Any) -> None:
        super().claim_discovery(team_id, installation_id, config_hash, **kwargs)
        self._record(team_id, installation_id)

    def replace_catalog(self, team_id: str, installation_id: str, discovered: DiscoveredCatalog) -> None:
        super().replace_catalog(team_id, installation_id, discovered)
        self._record(team_id, installation_id)

    def set_status(self, team_id: str, installation_id: str, status: InstallationStatus, *args: Any, **kw: Any) -> None:
        super().set_status(team_id, installation_id, status, *args, **kw)
        self._record(team_id, installation_id)

    def _record(self, team_id: str, installation_id: str) -> None:
        entry = next(
            e for e in self.load_catalog(team_id).installations if e.installation.installation_id == installation_id
        )
        with self._lock:
            self.history.setdefault(installation_id, []).append(entry.status)


class Stack:
    """One test's table and queue on the shared emulator, with the consumer wired as the handler wires it."""

    def __init__(self, endpoints: Endpoints, dynamodb: DynamoDBClient, sqs: SQSClient) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.table = f"catalog-{suffix}"
        create_tables(dynamodb, {"CatalogTable": self.table})
        self.sqs = sqs
        self.queue_url = sqs.create_queue(QueueName=f"discovery-{suffix}")["QueueUrl"]
        self.clock = Clock()
        self.events = RecordingEvents()
        self.settings = Settings(
            catalog_table=self.table,
            discovery_timeout_seconds=10.0,
            connect_timeout_seconds=2.0,
            discovery_queue_url=self.queue_url,
            rediscovery_ttl_seconds=3600.0,
        )
        self.store = RecordingStore(self.table, dynamodb)
        self.queue = SqsDiscoveryQueue(self.queue_url, client=sqs)
        self.consumer = DiscoveryConsumer(
            DiscoveryService(self.store, self.settings, queue=self.queue, events=self.events, now=self.clock)
        )
        self.team = f"team-{suffix}"
        self.endpoints = endpoints

    def install(self, slug: str, url: str) -> Installation:
        installation = Installation(f"i-{slug}", self.team, slug, Transport.STREAMABLE_HTTP, url=url)
        self.store.add_installation(installation)
        return installation

    def request(self, installation: Installation, reason: DiscoveryReason = DiscoveryReason.ADDED) -> None:
        self.queue.send(
            DiscoveryRequest(
                team_id=installation.team_id,
                installation_id=installation.installation_id,
                config_hash=installation.config_hash,
                reason=reason,
                requested_at=self.clock().isoformat(),
            )
        )

    def receive(self) -> list[dict[str, Any]]:
        """Every message now in the queue (moto makes sent messages visible at once)."""
        messages: list[dict[str, Any]] = []
        while True:
            batch = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"]
            ).get("Messages", [])
            if not batch:
                return messages
            messages.extend(batch)

    def deliver(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Invoke the consumer with ``messages`` as one SQS batch; delete those it did not report as failed."""
        response = self.consumer.handle(sqs_event(messages, self.queue_url), None)
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return response

    def schedule(self) -> dict[str, Any]:
        return self.consumer.handle(scheduled_event("rediscovery"), None)

    def entry(self, slug: str) -> Any:
        return self.store.load_catalog(self.team).by_slug(slug)


def sqs_event(messages: list[dict[str, Any]], queue_url: str) -> dict[str, Any]:
    arn = f"arn:aws:sqs:{REGION}:123456789012:{queue_url.rsplit('/', 1)[-1]}"
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


@pytest.fixture(scope="module")
def emulator() -> Iterator[tuple[Endpoints, DynamoDBClient, SQSClient]]:
    # DynamoDB Local for the table: moto evaluates concurrent conditional writes without isolation, so two
    # claims racing for one installation could both win there, never on DynamoDB. moto for SQS.
    with start_moto() as moto_endpoint, start_dynamodb_local() as dynamodb_endpoint:
        yield Endpoints(dynamodb_endpoint, moto_endpoint), dynamodb_client(dynamodb_endpoint), sqs_client(moto_endpoint)


@pytest.fixture
def stack(emulator: tuple[Endpoints, DynamoDBClient, SQSClient]) -> Stack:
    return Stack(*emulator)


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    with start_everything() as url:
        yield url


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    with start_scripted(ScriptedServer(tool_pages=[TOOLS])) as server:
        yield server


def test_queued_request_moves_never_discovering_success_and_stores_tools(stack: Stack, everything: str) -> None:
    # Given a new installation of a real server, and its discovery request in the queue
    installation = stack.install("everything", everything)
    assert stack.entry("everything").status.discovery is DiscoveryState.NEVER
    stack.request(installation)

    # When the consumer receives the batch
    response = stack.deliver(stack.receive())

    # Then no record failed, the status went never -> discovering -> success, and the tools are stored
    assert response == {"batchItemFailures": []}
    history = stack.store.history["i-everything"]
    assert [(s.status, s.discovery) for s in history] == [
        (Status.DISCOVERING, DiscoveryState.DISCOVERING),
        (Status.ONLINE, DiscoveryState.SUCCESS),
    ]
    entry = stack.entry("everything")
    assert len(entry.tools) == EVERYTHING_TOOLS
    assert entry.discovered_config_hash == installation.config_hash
    # And the discovery was published once
    assert stack.events.published == [("i-everything", EVERYTHING_TOOLS)]
    assert stack.receive() == []


def test_identical_requests_in_one_batch_discover_once(stack: Stack, scripted: ScriptedServer) -> None:
    # Given five identical requests for one installation
    installation = stack.install("scripted", scripted.url)
    for _ in range(5):
        stack.request(installation)
    messages = stack.receive()
    assert len(messages) == 5

    # When they arrive in one batch
    response = stack.deliver(messages)

    # Then every record succeeded and the upstream was listed exactly once
    assert response == {"batchItemFailures": []}
    assert scripted.count("tools/list") == 1
    assert [t.name for t in stack.entry("scripted").tools] == ["search", "fetch"]


def test_concurrent_discoveries_of_one_installation_run_once(stack: Stack, scripted: ScriptedServer) -> None:
    # Given one request delivered twice (SQS delivers at least once) to two concurrent consumers
    installation = stack.install("scripted", scripted.url)
    stack.request(installation)
    (message,) = stack.receive()
    start = threading.Barrier(2, timeout=10)
    responses: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            start.wait()
            responses.append(stack.consumer.handle(sqs_event([message], stack.queue_url), None))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    # When both run at once
    threads = [threading.Thread(target=consume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # Then both succeed, only one reached the upstream, and the status only moved forward
    assert errors == []
    assert responses == [{"batchItemFailures": []}] * 2
    assert scripted.count("tools/list") == 1
    history = stack.store.history["i-scripted"]
    assert [(s.status, s.discovery) for s in history] == [
        (Status.DISCOVERING, DiscoveryState.DISCOVERING),
        (Status.ONLINE, DiscoveryState.SUCCESS),
    ]
    assert history[0].changed_at <= history[1].changed_at


def test_malformed_record_fails_alone(stack: Stack, scripted: ScriptedServer) -> None:
    # Given a batch with a valid request, a body that is not JSON and a request with a bad timestamp
    installation = stack.install("scripted", scripted.url)
    stack.request(installation)
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody="{not json")
    bad_time = DiscoveryRequest(stack.team, "i-scripted", installation.config_hash, DiscoveryReason.MANUAL, "x")
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=bad_time.to_json())
    messages = stack.receive()
    malformed = {m["MessageId"] for m in messages if m["Body"] in ("{not json", bad_time.to_json())}

    # When the batch is consumed
    response = stack.deliver(messages)

    # Then exactly the two malformed records are reported failed, and the valid one was discovered
    assert {item["itemIdentifier"] for item in response["batchItemFailures"]} == malformed
    assert len(malformed) == 2
    assert stack.entry("scripted").status.status is Status.ONLINE


def test_request_for_a_changed_or_removed_installation_is_skipped(stack: Stack, scripted: ScriptedServer) -> None:
    # Given a request for an older configuration and one for a removed installation
    installation = stack.install("scripted", scripted.url)
    stack.request(installation)
    changed = Installation(
        installation.installation_id, stack.team, "scripted", Transport.STREAMABLE_HTTP, url=f"{scripted.url}?v=2"
    )
    stack.store.update_installation(changed)
    gone = stack.install("gone", scripted.url)
    stack.request(gone)
    stack.store.remove_installation(stack.team, gone.installation_id)

    # When they are consumed
    response = stack.deliver(stack.receive())

    # Then both succeed as records without any upstream call
    assert response == {"batchItemFailures": []}
    assert scripted.count("tools/list") == 0


async def test_upstream_down_keeps_tools_blocks_execution_and_recovers(stack: Stack) -> None:
    port = free_port()
    identity = Identity(stack.team)
    remote = RemoteUpstream(environment={}, call_timeout=10.0, connect_timeout=2.0)
    router = Router(stack.store, {Transport.STREAMABLE_HTTP: remote})
    try:
        with start_everything(port=port) as url:
            # Given an installation discovered and served
            installation = stack.install("everything", url)
            stack.request(installation)
            await anyio.to_thread.run_sync(lambda: stack.deliver(stack.receive()))
            result = await router.execute(identity, "everything:echo", {"message": "before"})
            assert "before" in json.dumps(result)

        # When the upstream is gone and a scheduled rediscovery (two hours later: the cache is stale) runs
        stack.clock.offset = TWO_HOURS
        scheduled = await anyio.to_thread.run_sync(stack.schedule)
        assert scheduled["due"] == 1
        response = await anyio.to_thread.run_sync(lambda: stack.deliver(stack.receive()))

        # Then the record succeeded, the tools are kept and the status says offline, retry later
        assert response == {"batchItemFailures": []}
        entry = stack.entry("everything")
        assert len(entry.tools) == EVERYTHING_TOOLS
        assert (entry.status.status, entry.status.discovery) == (Status.OFFLINE, DiscoveryState.FAILED)
        assert entry.status.error_class is ErrorClass.RETRY_LATER
        assert entry.status.failure_kind == "unreachable"
        assert entry.status.suggestion
        # And once the router has seen the new catalog version (it checks alongside each call), execution is
        # blocked with a clear message
        assert (await router.view(identity)).by_slug("everything").serves is False
        with pytest.raises(Unavailable, match="is offline since .*refused the connection"):
            await router.execute(identity, "everything:echo", {"message": "during"})

        with start_everything(port=port):
            # When the upstream is back and the schedule runs again (recovery: it is offline)
            scheduled = await anyio.to_thread.run_sync(stack.schedule)
            assert scheduled["due"] == 1
            await anyio.to_thread.run_sync(lambda: stack.deliver(stack.receive()))

            # Then it is online and served again
            entry = stack.entry("everything")
            assert (entry.status.status, entry.status.discovery) == (Status.ONLINE, DiscoveryState.SUCCESS)
            assert entry.status.last_error is None
            result = await router.execute(identity, "everything:echo", {"message": "after"})
            assert "after" in json.dumps(result)
    finally:
        await remote.aclose()


def test_schedule_rediscovers_a_stale_cache_and_not_a_fresh_one(stack: Stack, scripted: ScriptedServer) -> None:
    # Given one installation discovered now and another discovered two hours later (both online)
    stale = stack.install("stale", scripted.url)
    fresh = stack.install("fresh", scripted.url)
    stack.request(stale)
    stack.deliver(stack.receive())
    stack.clock.offset = TWO_HOURS
    stack.request(fresh)
    stack.deliver(stack.receive())
    assert scripted.count("tools/list") == 2

    # When the schedule runs just after the second discovery (TTL one hour)
    stack.clock.offset = TWO_HOURS + timedelta(minutes=1)
    scheduled = stack.schedule()

    # Then only the stale one was requested, and consuming the request discovers it alone
    assert scheduled["installations"] == [f"{stack.team}/{stale.installation_id}/{stale.config_hash}"]
    messages = stack.receive()
    assert [DiscoveryRequest.from_json(m["Body"]).reason for m in messages] == [DiscoveryReason.STALE]
    stack.deliver(messages)
    assert scripted.count("tools/list") == 3
    assert fresh.installation_id not in {r.split("/")[1] for r in stack.schedule()["installations"]}


def test_lambda_entry_wires_the_consumer_from_the_environment(
    stack: Stack, scripted: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the function's environment as the template sets it, and a request in the queue
    for name, value in {
        "AWS_ENDPOINT_URL_DYNAMODB": stack.endpoints.dynamodb,
        "AWS_ENDPOINT_URL_SQS": stack.endpoints.sqs,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "SATELLITE_CATALOG_TABLE": stack.table,
        "SATELLITE_DISCOVERY_QUEUE_URL": stack.queue_url,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("SATELLITE_EVENT_BUS_NAME", raising=False)
    sys.modules.pop("functions.discovery.handler", None)
    handler = importlib.import_module("functions.discovery.handler")
    installation = stack.install("scripted", scripted.url)
    stack.request(installation)
    messages = stack.receive()

    # When the Lambda entry point is invoked with the batch
    response = handler.handler(sqs_event(messages, stack.queue_url), None)

    # Then the installation was discovered through the module-level wiring
    assert response == {"batchItemFailures": []}
    assert stack.entry("scripted").status.status is Status.ONLINE


def test_queue_adapter_translates_sqs_errors(stack: Stack) -> None:
    # Given a queue adapter pointed at a queue that does not exist, and one without any queue URL
    missing = SqsDiscoveryQueue(f"{stack.queue_url}-missing", client=stack.sqs)
    unconfigured = SqsDiscoveryQueue("")
    request = DiscoveryRequest(stack.team, "i-1", "hash", DiscoveryReason.MANUAL, datetime.now(UTC).isoformat())

    # When a request is sent / Then both refuse with the store's error type, naming the cause
    with pytest.raises(StoreError, match="send_message failed"):
        missing.send(request)
    with pytest.raises(StoreError, match="SATELLITE_DISCOVERY_QUEUE_URL"):
        unconfigured.send(request)
