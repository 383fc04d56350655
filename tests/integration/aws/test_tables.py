"""Tables are created from template.yaml's declarations, on moto and on DynamoDB Local."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from satellite.aws.tables import Intrinsic, create_tables, declared_tables, load_template
from satellite.errors import StoreError

if TYPE_CHECKING:
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
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt RequestDlq.Arn
        maxReceiveCount: 3
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
