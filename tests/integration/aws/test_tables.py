"""Tables are created from template.yaml's declarations, on moto and on DynamoDB Local."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from satellite.aws.tables import (
    Intrinsic,
    ResourceClients,
    create_resources,
    create_tables,
    declared,
    declared_tables,
    load_template,
)
from satellite.errors import StoreError
from tests.support.aws import dynamodb_client, events_client, sqs_client, start_moto

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from mypy_boto3_dynamodb import DynamoDBClient

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Stage:
    Type: String
Resources:
  ClaimsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${AWS::StackName}-claims"
      BillingMode: PROVISIONED
      ProvisionedThroughput:
        ReadCapacityUnits: 2
        WriteCapacityUnits: 3
      AttributeDefinitions:
        - AttributeName: request_id
          AttributeType: S
        - AttributeName: team
          AttributeType: S
      KeySchema:
        - AttributeName: request_id
          KeyType: HASH
      GlobalSecondaryIndexes:
        - IndexName: by-team
          KeySchema:
            - AttributeName: team
              KeyType: HASH
          Projection:
            ProjectionType: KEYS_ONLY
      TimeToLiveSpecification:
        AttributeName: expires_at
        Enabled: true
  RequestQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 0
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt RequestDlq.Arn
        maxReceiveCount: 3
  RequestDlq:
    Type: AWS::SQS::Queue
    Properties:
      MessageRetentionPeriod: 1209600
  GatewayFunction:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          TABLE: !Ref ClaimsTable
          QUEUE: !Sub
            - "${Url}/x"
            - Url: !GetAtt RequestQueue.QueueUrl
      Policies: !If [IsProd, [], !Ref "AWS::NoValue"]
  BrokenTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - AttributeName: !Ref Stage
          AttributeType: S
      KeySchema:
        - AttributeName: !Ref Stage
          KeyType: HASH
"""


@pytest.fixture
def template(tmp_path: Path) -> dict[str, object]:
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE, encoding="utf-8")
    return load_template(path)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_short_form_intrinsics_parse_and_only_tables_are_declared(template: dict[str, object]) -> None:
    # Given a template with !Ref, !Sub (both forms), !GetAtt and !If / When its tables are listed
    tables = declared_tables(template)
    resources = template["Resources"]
    assert isinstance(resources, dict)
    function = resources["GatewayFunction"]["Properties"]

    # Then only DynamoDB tables are declared, and intrinsics are kept unresolved with their arguments
    assert sorted(tables) == ["BrokenTable", "ClaimsTable"]
    assert tables["ClaimsTable"]["TableName"] == Intrinsic("Sub", "${AWS::StackName}-claims")
    assert function["Environment"]["Variables"]["TABLE"] == Intrinsic("Ref", "ClaimsTable")
    assert function["Environment"]["Variables"]["QUEUE"] == Intrinsic(
        "Sub", ["${Url}/x", {"Url": Intrinsic("GetAtt", "RequestQueue.QueueUrl")}]
    )
    assert function["Policies"] == Intrinsic("If", ["IsProd", [], Intrinsic("Ref", "AWS::NoValue")])


def test_catalog_table_is_created_as_declared_and_creation_is_idempotent(dynamodb: DynamoDBClient) -> None:
    # Given the project's template.yaml
    declared = declared_tables(load_template())["CatalogTable"]
    name = unique("catalog")

    # When the catalog table is created, an item written, and the table created again
    create_tables(dynamodb, {"CatalogTable": name})
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "TEAM#t"}, "sk": {"S": "VERSION"}})
    create_tables(dynamodb, {"CatalogTable": name})

    # Then the table is ACTIVE with the declared keys and billing mode, and the item survived
    table = dynamodb.describe_table(TableName=name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert sorted(table["KeySchema"], key=str) == sorted(declared["KeySchema"], key=str)
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(declared["AttributeDefinitions"], key=str)
    assert table["BillingModeSummary"]["BillingMode"] == declared["BillingMode"] == "PAY_PER_REQUEST"
    item = dynamodb.get_item(TableName=name, Key={"pk": {"S": "TEAM#t"}, "sk": {"S": "VERSION"}})
    assert "Item" in item


def test_indexes_throughput_and_time_to_live_are_applied(dynamodb: DynamoDBClient, template: dict[str, object]) -> None:
    # Given a provisioned table with a GSI and a TTL, among resources of other types
    name = unique("claims")

    # When it is created twice
    create_tables(dynamodb, {"ClaimsTable": name}, template=template)
    create_tables(dynamodb, {"ClaimsTable": name}, template=template)

    # Then the index, throughput and time-to-live are as declared
    table = dynamodb.describe_table(TableName=name)["Table"]
    assert table["KeySchema"] == [{"AttributeName": "request_id", "KeyType": "HASH"}]
    assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 2
    assert table["ProvisionedThroughput"]["WriteCapacityUnits"] == 3
    [index] = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "by-team"
    assert index["KeySchema"] == [{"AttributeName": "team", "KeyType": "HASH"}]
    assert index["Projection"]["ProjectionType"] == "KEYS_ONLY"
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] in ("ENABLED", "ENABLING")
    assert ttl["AttributeName"] == "expires_at"


def test_a_name_that_is_not_a_declared_table_is_refused(dynamodb: DynamoDBClient, template: dict[str, object]) -> None:
    # Given a logical id of a queue / When it is created as a table / Then StoreError names it
    with pytest.raises(StoreError, match="RequestQueue"):
        create_tables(dynamodb, {"RequestQueue": unique("queue")}, template=template)


def test_an_unresolvable_intrinsic_in_a_table_property_is_refused(
    dynamodb: DynamoDBClient, template: dict[str, object]
) -> None:
    # Given a table whose key names come from !Ref / When it is created / Then StoreError, and no table exists
    name = unique("broken")
    with pytest.raises(StoreError, match="intrinsic"):
        create_tables(dynamodb, {"BrokenTable": name}, template=template)
    assert name not in dynamodb.list_tables()["TableNames"]


@pytest.fixture(scope="module")
def aws_clients() -> Iterator[ResourceClients]:
    """Clients for one moto server: DynamoDB Local has no queues or buses."""
    with start_moto() as endpoint:
        yield ResourceClients(
            dynamodb=dynamodb_client(endpoint), sqs=sqs_client(endpoint), events=events_client(endpoint)
        )


def receive(clients: ResourceClients, queue_url: str, timeout_seconds: float = 5.0) -> list[dict[str, Any]]:
    assert clients.sqs is not None
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        messages = clients.sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", [])
        if messages:
            return [dict(m) for m in messages]
    return []


def test_the_metadata_bus_rule_and_queues_are_created_as_declared_and_deliver(aws_clients: ResourceClients) -> None:
    # Given the project template's metadata pipeline resources
    template = load_template()
    queues = declared(template, "AWS::SQS::Queue")
    rule = declared(template, "AWS::Events::Rule")["ToolsDiscoveredRule"]
    names = {
        "EventBus": unique("bus"),
        "ToolsDiscoveredRule": unique("rule"),
        "MetadataBufferQueue": unique("buffer"),
        "MetadataDeadLetterQueue": unique("dlq"),
    }

    # When they are created twice (idempotent)
    create_resources(aws_clients, names)
    created = create_resources(aws_clients, names)

    # Then the queues carry the declared visibility, retention and redrive to the dead-letter queue
    assert aws_clients.sqs is not None and aws_clients.events is not None
    attributes = aws_clients.sqs.get_queue_attributes(QueueUrl=created["MetadataBufferQueue"], AttributeNames=["All"])[
        "Attributes"
    ]
    declared_buffer = queues["MetadataBufferQueue"]
    assert attributes["VisibilityTimeout"] == str(declared_buffer["VisibilityTimeout"])
    assert attributes["MessageRetentionPeriod"] == str(declared_buffer["MessageRetentionPeriod"])
    dlq_arn = aws_clients.sqs.get_queue_attributes(
        QueueUrl=created["MetadataDeadLetterQueue"], AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": declared_buffer["RedrivePolicy"]["maxReceiveCount"],
    }
    # And the rule on the bus has the declared pattern and targets the buffer queue
    described = aws_clients.events.describe_rule(Name=names["ToolsDiscoveredRule"], EventBusName=names["EventBus"])
    assert json.loads(described["EventPattern"]) == rule["EventPattern"]
    [target] = aws_clients.events.list_targets_by_rule(
        Rule=names["ToolsDiscoveredRule"], EventBusName=names["EventBus"]
    )["Targets"]
    assert target["Arn"] == attributes["QueueArn"]
    # And a matching event reaches the queue while another detail-type does not
    for detail_type in ("Scheduled Event", "mcp.tools.discovered"):
        aws_clients.events.put_events(
            Entries=[
                {
                    "EventBusName": names["EventBus"],
                    "Source": "satellite.discovery",
                    "DetailType": detail_type,
                    "Detail": json.dumps({"kind": detail_type}),
                }
            ]
        )
    [message] = receive(aws_clients, created["MetadataBufferQueue"])
    assert json.loads(message["Body"])["detail"] == {"kind": "mcp.tools.discovered"}


def test_a_message_received_too_often_moves_to_the_dead_letter_queue(
    aws_clients: ResourceClients, template: dict[str, object]
) -> None:
    # Given a queue redriving after three receives (visibility 0: each receive makes it visible again)
    created = create_resources(
        aws_clients, {"RequestQueue": unique("requests"), "RequestDlq": unique("dlq")}, template=template
    )
    assert aws_clients.sqs is not None
    aws_clients.sqs.send_message(QueueUrl=created["RequestQueue"], MessageBody="poison")

    # When it is received until it stops coming back
    receives = 0
    while receive(aws_clients, created["RequestQueue"], timeout_seconds=2):
        receives += 1
        assert receives <= 3

    # Then after three receives it waits in the dead-letter queue
    assert receives == 3
    [message] = receive(aws_clients, created["RequestDlq"])
    assert message["Body"] == "poison"


def test_a_redrive_to_a_queue_not_created_alongside_is_refused(
    aws_clients: ResourceClients, template: dict[str, object]
) -> None:
    # Given a queue whose dead-letter queue is not named / When it is created / Then StoreError names the reference
    with pytest.raises(StoreError, match="RequestDlq"):
        create_resources(aws_clients, {"RequestQueue": unique("requests")}, template=template)


def test_unsupported_resource_types_and_missing_clients_are_refused(
    aws_clients: ResourceClients, template: dict[str, object]
) -> None:
    # Given a function's logical id / When it is created / Then StoreError names it
    with pytest.raises(StoreError, match="GatewayFunction"):
        create_resources(aws_clients, {"GatewayFunction": "fn"}, template=template)
    # Given no SQS client / When a queue is created / Then StoreError says which client is missing
    with pytest.raises(StoreError, match="sqs client"):
        create_resources(ResourceClients(), {"RequestDlq": unique("dlq")}, template=template)
