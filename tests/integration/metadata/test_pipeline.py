"""The metadata pipeline on moto: EventBridgePublisher -> ToolsDiscoveredRule -> SQS buffer -> batcher -> table.

Resources come from template.yaml; the batcher is the Lambda entry point, invoked with Lambda-shaped SQS events
built from the messages the rule really delivered.
"""

from __future__ import annotations

import importlib
import json
import random
import sys
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from satellite.aws.events import EventBridgePublisher
from satellite.aws.metadata_store import DynamoMetadataStore
from satellite.aws.tables import ResourceClients, create_resources
from satellite.errors import StoreError
from satellite.metadata import listed_entry
from satellite.tokens import encoding
from tests.support.aws import REGION, dynamodb_client, events_client, sqs_client
from tests.unit.test_metadata import DISCOVERED_AT, direct_tool_tokens, installation, synthetic_catalog

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from satellite.catalog import DiscoveredCatalog

NAMES = {
    "EventBus": "satellite-events-test",
    "ToolsDiscoveredRule": "satellite-tools-discovered-test",
    "MetadataBufferQueue": "satellite-metadata-buffer-test",
    "MetadataDeadLetterQueue": "satellite-metadata-dlq-test",
    "MetadataTable": "satellite-metadata-pipeline-test",
}
TABLE = NAMES["MetadataTable"]


class LambdaContext:
    function_name = "MetadataFunction"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:MetadataFunction"
    memory_limit_in_mb = 512
    aws_request_id = "test-request"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000


class Pipeline:
    """The wired pipeline: a publisher, the buffer queue, the batcher's handler and a store to read back."""

    def __init__(self, endpoint: str, handler: Callable[[dict[str, Any], Any], dict[str, Any]]) -> None:
        self.sqs: SQSClient = sqs_client(endpoint)
        self.events = events_client(endpoint)
        self.dynamodb: DynamoDBClient = dynamodb_client(endpoint)
        self.resources = create_resources(
            ResourceClients(dynamodb=self.dynamodb, sqs=self.sqs, events=self.events), NAMES
        )
        self.queue_url = self.resources["MetadataBufferQueue"]
        self.queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.publisher = EventBridgePublisher(self.resources["EventBus"], client=self.events)
        self.store = DynamoMetadataStore(TABLE, client=self.dynamodb)
        self.handler = handler

    def publish(
        self, team_id: str, discovered: DiscoveredCatalog, installation_id: str = "i-1"
    ) -> list[dict[str, Any]]:
        """Publish one discovery and return the SQS messages the rule delivered for it."""
        self.publisher.publish_tools_discovered(installation(installation_id, team_id=team_id), discovered)
        return self.receive_all()

    def receive_all(self, timeout_seconds: float = 10.0) -> list[dict[str, Any]]:
        # Every part of one discovery: the first message says how many there are.
        messages: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_seconds
        expected: int | None = None
        while expected is None or len(messages) < expected:
            assert time.monotonic() < deadline, f"only {len(messages)} of {expected} messages arrived"
            response = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"]
            )
            for message in response.get("Messages", []):
                messages.append(dict(message))
                expected = json.loads(message["Body"])["detail"]["parts"]
        return messages

    def invoke(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Run the batcher on a Lambda SQS event made of ``messages``, as the event source mapping sends it."""
        return self.handler({"Records": [self.record(m) for m in messages]}, LambdaContext())

    def record(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {},
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": REGION,
        }

    def raw_items(self, team_id: str) -> list[dict[str, Any]]:
        response = self.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"TEAM#{team_id}"}},
            ConsistentRead=True,
        )
        return sorted(response["Items"], key=lambda item: item["sk"]["S"])


@pytest.fixture(scope="module")
def pipeline(moto_endpoint: str) -> Iterator[Pipeline]:
    with pytest.MonkeyPatch.context() as patch:
        # The function's environment as the template sets it
        for name, value in {
            "AWS_ENDPOINT_URL": moto_endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "SATELLITE_METADATA_TABLE": TABLE,
        }.items():
            patch.setenv(name, value)
        sys.modules.pop("functions.metadata.handler", None)
        module = importlib.import_module("functions.metadata.handler")
        yield Pipeline(moto_endpoint, module.handler)
        sys.modules.pop("functions.metadata.handler", None)


def team() -> str:
    return f"team-{uuid.uuid4().hex[:8]}"


def test_an_event_travels_through_the_rule_and_the_batcher_with_exact_token_counts(pipeline: Pipeline) -> None:
    # Given a discovery of twelve tools published to the bus
    team_id = team()
    discovered = synthetic_catalog(12)
    messages = pipeline.publish(team_id, discovered)

    # When the rule's delivery is handed to the batcher
    response = pipeline.invoke(messages)

    # Then nothing failed, and the table holds every tool with tiktoken's own count, and the totals
    assert response == {"batchItemFailures": []}
    stored = pipeline.store.installation_metadata(team_id, "i-1")
    assert stored is not None
    expected = {t.name: direct_tool_tokens(dict(t.definition)) for t in discovered.tools}
    assert {t.tool_name: t.token_count for t in stored.tools} == expected
    assert stored.totals.total_tokens == sum(expected.values())
    assert stored.totals.tool_count == 12
    assert pipeline.store.installation_totals(team_id, "i-1") == stored.totals


def test_a_replayed_batch_changes_nothing(pipeline: Pipeline) -> None:
    # Given a stored discovery
    team_id = team()
    messages = pipeline.publish(team_id, synthetic_catalog(5))
    pipeline.invoke(messages)
    before = pipeline.raw_items(team_id)

    # When the same batch is delivered again
    response = pipeline.invoke(messages)

    # Then it succeeds and not one attribute of one item changed
    assert response == {"batchItemFailures": []}
    assert pipeline.raw_items(team_id) == before


def test_an_older_discovery_never_overwrites_a_newer_one(pipeline: Pipeline) -> None:
    # Given a newer discovery stored first, and an older one delivered afterwards
    team_id = team()
    newer = synthetic_catalog(3, discovered_at=DISCOVERED_AT + timedelta(minutes=5), seed=" New.")
    older = synthetic_catalog(7, discovered_at=DISCOVERED_AT)
    pipeline.invoke(pipeline.publish(team_id, newer))
    before = pipeline.raw_items(team_id)

    # When the older one arrives
    response = pipeline.invoke(pipeline.publish(team_id, older))

    # Then it is accepted (not retried) and changes nothing: the newer metadata stays
    assert response == {"batchItemFailures": []}
    assert pipeline.raw_items(team_id) == before
    stored = pipeline.store.installation_metadata(team_id, "i-1")
    assert stored is not None
    assert stored.totals.tool_count == 3


def test_one_bad_record_alone_is_reported_and_the_others_are_stored(pipeline: Pipeline) -> None:
    # Given a batch of two good events around a record that is not an event
    first, second = team(), team()
    good = pipeline.publish(first, synthetic_catalog(2)) + pipeline.publish(second, synthetic_catalog(4))
    bad = {**good[0], "MessageId": "bad-record", "Body": '{"detail-type": "mcp.tools.discovered", "detail": {}}'}

    # When the batcher processes it
    response = pipeline.invoke([good[0], bad, good[1]])

    # Then only the bad record is reported for retry, and both good ones are stored
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad-record"}]}
    first_totals = pipeline.store.installation_totals(first, "i-1")
    second_totals = pipeline.store.installation_totals(second, "i-1")
    assert first_totals is not None and first_totals.tool_count == 2
    assert second_totals is not None and second_totals.tool_count == 4


def test_a_large_catalog_travels_in_parts_and_becomes_visible_only_when_complete(pipeline: Pipeline) -> None:
    # Given a stored small discovery, then a 1,500-tool discovery published as several parts, shuffled
    team_id = team()
    pipeline.invoke(pipeline.publish(team_id, synthetic_catalog(2)))
    large = synthetic_catalog(1500, discovered_at=DISCOVERED_AT + timedelta(minutes=1))
    messages = pipeline.publish(team_id, large)
    assert len(messages) > 1
    random.Random(7).shuffle(messages)

    # When all parts but one are processed
    assert pipeline.invoke(messages[:-1]) == {"batchItemFailures": []}

    # Then readers still see the old metadata, whole
    partial = pipeline.store.installation_metadata(team_id, "i-1")
    assert partial is not None and len(partial.tools) == partial.totals.tool_count == 2

    # When the last part arrives
    assert pipeline.invoke(messages[-1:]) == {"batchItemFailures": []}

    # Then the large catalog is there, tool by tool, with tiktoken's counts, and the old generation is swept
    stored = pipeline.store.installation_metadata(team_id, "i-1")
    assert stored is not None
    assert [t.tool_name for t in stored.tools] == [t.name for t in large.tools]
    assert [t.token_count for t in stored.tools] == [direct_tool_tokens(dict(t.definition)) for t in large.tools]
    parts = [item for item in pipeline.raw_items(team_id) if item["sk"]["S"].startswith("PART#")]
    assert len(parts) == len(messages)


def test_publishing_to_a_missing_bus_raises_store_error(pipeline: Pipeline) -> None:
    # Given a publisher for a bus that does not exist
    publisher = EventBridgePublisher(f"missing-{uuid.uuid4().hex[:6]}", client=pipeline.events)

    # When a discovery is published / Then StoreError says the bus refused it
    with pytest.raises(StoreError, match="mcp.tools.discovered"):
        publisher.publish_tools_discovered(installation(), synthetic_catalog(1))


def test_token_savings_of_a_team(pipeline: Pipeline) -> None:
    # Given two installations' discoveries stored through the pipeline
    team_id = team()
    first, second = synthetic_catalog(30), synthetic_catalog(20, seed=" Other.")
    pipeline.invoke(pipeline.publish(team_id, first, installation_id="i-1"))
    pipeline.invoke(pipeline.publish(team_id, second, installation_id="i-2"))

    # When the team's savings are read
    savings = pipeline.store.token_savings(team_id)

    # Then they cover both installations and the meta-tools cost far less than the tools listed directly
    assert (savings["installations"], savings["tools"]) == (2, 50)
    assert savings["direct_tokens"] > 5 * savings["meta_tools_tokens"] > 0
    assert savings["reduction_percent"] > 80
    # And "direct" is the tools/list JSON a client would receive, counted whole (up to a token per seam)
    listed = [listed_entry("files", dict(t.definition)) for t in (*first.tools, *second.tools)]
    whole = json.dumps({"tools": listed}, separators=(",", ":"), ensure_ascii=False)
    assert abs(savings["direct_tokens"] - len(encoding("cl100k_base").encode(whole))) <= 3
