"""Create the resources declared in ``template.yaml``, so local and deployed stacks cannot drift.

The template is the single declaration. :func:`create_tables` reads every ``AWS::DynamoDB::Table`` resource and
creates it with the same key schema, attribute definitions, indexes, billing mode and time-to-live.
:func:`create_resources` creates tables and also ``AWS::SQS::Queue`` (visibility timeout, retention, delay, message
size, wait time, FIFO settings and the redrive policy to its dead-letter queue), ``AWS::Events::EventBus`` and
``AWS::Events::Rule`` (pattern or schedule, state, and those targets that are created queues) resources. Settings
that change nothing an emulator does (point-in-time recovery, encryption, deletion policies, queue policies) are
not applied, and rule targets that are not created queues (functions) are left out: locally the stack invokes the
functions itself.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from botocore.exceptions import BotoCoreError, ClientError

from satellite.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "DEFAULT_TEMPLATE",
    "Intrinsic",
    "ResourceClients",
    "create_resources",
    "create_tables",
    "declared",
    "declared_tables",
    "load_template",
]

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
_TABLE_TYPE = "AWS::DynamoDB::Table"
_QUEUE_TYPE = "AWS::SQS::Queue"
_BUS_TYPE = "AWS::Events::EventBus"
_RULE_TYPE = "AWS::Events::Rule"
_CREATED_TYPES = (_TABLE_TYPE, _QUEUE_TYPE, _BUS_TYPE, _RULE_TYPE)
# CloudFormation property -> SQS attribute; every value is sent as a string.
_QUEUE_ATTRIBUTES = {
    "DelaySeconds": "DelaySeconds",
    "MaximumMessageSize": "MaximumMessageSize",
    "MessageRetentionPeriod": "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds": "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout": "VisibilityTimeout",
    "ContentBasedDeduplication": "ContentBasedDeduplication",
}
_ACTIVE = "ACTIVE"


@dataclass(frozen=True, slots=True)
class Intrinsic:
    """A CloudFormation intrinsic function such as ``!Ref X`` or ``!Sub '...'``, kept unresolved."""

    tag: str
    value: Any


class _TemplateLoader(yaml.SafeLoader):
    """A safe loader that accepts CloudFormation's short-form tags instead of failing on them."""


def _construct_intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Intrinsic:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:
        raise yaml.constructor.ConstructorError(None, None, f"unexpected node for !{tag_suffix}", node.start_mark)
    return Intrinsic(tag_suffix, value)


_TemplateLoader.add_multi_constructor("!", _construct_intrinsic)


def load_template(path: Path | None = None) -> dict[str, Any]:
    """Parse a CloudFormation/SAM template, keeping intrinsic functions as :class:`Intrinsic` values.

    Raises:
        StoreError: the file cannot be read or is not a YAML mapping.
    """
    source = path or DEFAULT_TEMPLATE
    try:
        document = yaml.load(source.read_text(encoding="utf-8"), Loader=_TemplateLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise StoreError(f"cannot read the template {source}: {exc}") from exc
    if not isinstance(document, dict):
        raise StoreError(f"the template {source} is not a YAML mapping")
    return document


def declared(template: Mapping[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    """The ``Properties`` of every resource of ``resource_type``, by logical id."""
    resources = template.get("Resources") or {}
    return {
        logical_id: dict(resource.get("Properties") or {})
        for logical_id, resource in resources.items()
        if isinstance(resource, dict) and resource.get("Type") == resource_type
    }


def declared_tables(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``Properties`` of every ``AWS::DynamoDB::Table`` resource, by logical id."""
    return declared(template, _TABLE_TYPE)


@dataclass(frozen=True, slots=True)
class ResourceClients:
    """Low-level clients for :func:`create_resources`; only those the named resources need are required."""

    dynamodb: DynamoDBClient | None = None
    sqs: SQSClient | None = None
    events: EventBridgeClient | None = None


def create_resources(
    clients: ResourceClients,
    names: Mapping[str, str],
    *,
    template: Mapping[str, Any] | None = None,
    timeout_seconds: float = 30.0,
) -> dict[str, str]:
    """Create the declared tables, queues, event buses and rules named in ``names`` (logical id -> physical name).

    Idempotent: existing resources are kept, and queue attributes, rules and their targets are set again to what
    the template declares. References between resources (``!GetAtt Dlq.Arn`` in a redrive policy, ``!Ref Bus`` and
    ``!GetAtt Queue.Arn`` in a rule) must name resources created in the same call; dead-letter queues are created
    before the queues that redrive to them.

    Args:
        clients: the clients the named resource types need.
        names: physical name for each logical id, e.g. ``{"MetadataBufferQueue": "satellite-metadata-buffer"}``.
        template: a parsed template; ``template.yaml`` at the repository root by default.
        timeout_seconds: how long to wait for each table to become ACTIVE.

    Returns:
        What ``!Ref`` gives for each logical id, as CloudFormation does: the table name, queue URL, bus name or
        rule name.

    Raises:
        StoreError: a logical id is not a declared resource of a supported type, a property uses an intrinsic
            function that cannot be resolved locally, a client is missing, or AWS refused a call.
    """
    parsed = load_template() if template is None else template
    by_type = {resource_type: declared(parsed, resource_type) for resource_type in _CREATED_TYPES}
    kinds = {logical_id: t for t, resources in by_type.items() for logical_id in resources}
    unknown = sorted(set(names) - set(kinds))
    if unknown:
        raise StoreError(f"{', '.join(unknown)} not declared as any of {', '.join(_CREATED_TYPES)} in the template")
    created: dict[str, _Created] = {}
    tables = {logical_id: name for logical_id, name in names.items() if kinds[logical_id] == _TABLE_TYPE}
    if tables:
        create_tables(_client(clients.dynamodb, "dynamodb"), tables, template=parsed, timeout_seconds=timeout_seconds)
        created.update({logical_id: _Created(ref=name, arn=name) for logical_id, name in tables.items()})
    queues = [logical_id for logical_id in names if kinds[logical_id] == _QUEUE_TYPE]
    for logical_id in _dead_letter_queues_first(queues, by_type[_QUEUE_TYPE]):
        sqs = _client(clients.sqs, "sqs")
        created[logical_id] = _create_queue(sqs, logical_id, names[logical_id], by_type[_QUEUE_TYPE], created)
    for logical_id in (i for i in names if kinds[i] == _BUS_TYPE):
        events = _client(clients.events, "events")
        created[logical_id] = _create_bus(events, names[logical_id])
    for logical_id in (i for i in names if kinds[i] == _RULE_TYPE):
        events = _client(clients.events, "events")
        properties = by_type[_RULE_TYPE][logical_id]
        created[logical_id] = _create_rule(events, logical_id, names[logical_id], properties, created)
    return {logical_id: created[logical_id].ref for logical_id in names}


@dataclass(frozen=True, slots=True)
class _Created:
    """What ``!Ref`` and ``!GetAtt X.Arn`` resolve to for a created resource."""

    ref: str
    arn: str


def _client(client: Any, service: str) -> Any:
    if client is None:
        raise StoreError(f"a {service} client is needed to create the named resources")
    return client


def _resolve(value: Any, created: Mapping[str, _Created], where: str) -> str:
    # Only references to resources created in this call resolve; anything else is refused, not guessed.
    if isinstance(value, str):
        return value
    if isinstance(value, Intrinsic) and value.tag == "Ref" and value.value in created:
        return created[value.value].ref
    if isinstance(value, Intrinsic) and value.tag == "GetAtt":
        target, _, attribute = str(value.value).partition(".")
        if target in created and attribute == "Arn":
            return created[target].arn
        if target in created and attribute == "QueueUrl":
            return created[target].ref
    raise StoreError(f"{where} refers to {value!r}, which is not created in the same call; name it too")


def _refers_to(value: Any) -> str | None:
    if isinstance(value, Intrinsic) and value.tag in ("Ref", "GetAtt"):
        return str(value.value).partition(".")[0]
    return None


def _dead_letter_queues_first(queues: list[str], declared_queues: Mapping[str, Mapping[str, Any]]) -> list[str]:
    def redrive_target(logical_id: str) -> str | None:
        redrive = declared_queues[logical_id].get("RedrivePolicy") or {}
        return _refers_to(redrive.get("deadLetterTargetArn")) if isinstance(redrive, dict) else None

    return sorted(queues, key=lambda logical_id: redrive_target(logical_id) is not None)


def _create_queue(
    sqs: SQSClient,
    logical_id: str,
    queue_name: str,
    declared_queues: Mapping[str, Mapping[str, Any]],
    created: Mapping[str, _Created],
) -> _Created:
    properties = declared_queues[logical_id]
    attributes: dict[str, str] = {}
    for prop, attribute in _QUEUE_ATTRIBUTES.items():
        if prop in properties:
            attributes[attribute] = _attribute(_literal(properties[prop], logical_id, prop))
    redrive = properties.get("RedrivePolicy")
    if redrive is not None:
        if not isinstance(redrive, dict):
            raise StoreError(f"{logical_id}.RedrivePolicy must be a mapping")
        target = _resolve(redrive.get("deadLetterTargetArn"), created, f"{logical_id}.RedrivePolicy")
        receives = _literal(redrive.get("maxReceiveCount"), logical_id, "RedrivePolicy.maxReceiveCount")
        attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": int(receives)})
    fifo = bool(_literal(properties.get("FifoQueue", False), logical_id, "FifoQueue"))
    try:
        # FifoQueue can only be given at creation; everything else is (re)applied, so a re-run converges.
        url = sqs.create_queue(QueueName=queue_name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
        if attributes:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)  # type: ignore[arg-type]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot create queue {queue_name}: {exc}") from exc
    logger.info("queue created", extra={"operation": "create_queue", "queue": queue_name})
    return _Created(ref=url, arn=arn)


def _attribute(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _create_bus(events: EventBridgeClient, bus_name: str) -> _Created:
    try:
        try:
            arn = events.create_event_bus(Name=bus_name)["EventBusArn"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                raise
            arn = events.describe_event_bus(Name=bus_name)["Arn"]
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot create event bus {bus_name}: {exc}") from exc
    logger.info("event bus created", extra={"operation": "create_event_bus", "bus": bus_name})
    return _Created(ref=bus_name, arn=arn)


def _create_rule(
    events: EventBridgeClient,
    logical_id: str,
    rule_name: str,
    properties: Mapping[str, Any],
    created: Mapping[str, _Created],
) -> _Created:
    request: dict[str, Any] = {"Name": rule_name}
    bus = properties.get("EventBusName")
    if bus is not None:
        request["EventBusName"] = _resolve(bus, created, f"{logical_id}.EventBusName")
    pattern = properties.get("EventPattern")
    if pattern is not None:
        request["EventPattern"] = json.dumps(_literal(pattern, logical_id, "EventPattern"))
    for prop in ("ScheduleExpression", "State", "Description"):
        if prop in properties:
            request[prop] = str(_literal(properties[prop], logical_id, prop))
    targets = []
    for index, target in enumerate(properties.get("Targets") or []):
        if _refers_to(target.get("Arn")) not in created:
            logger.info(
                "rule target left out: it is not a resource created locally",
                extra={"operation": "create_rule", "rule": rule_name, "target": target.get("Id")},
            )
            continue
        entry = {
            "Id": str(_literal(target["Id"], logical_id, f"Targets[{index}].Id")),
            "Arn": _resolve(target["Arn"], created, f"{logical_id}.Targets[{index}].Arn"),
        }
        for prop in ("Input", "InputPath"):
            if prop in target:
                entry[prop] = str(_literal(target[prop], logical_id, f"Targets[{index}].{prop}"))
        targets.append(entry)
    try:
        arn = events.put_rule(**request)["RuleArn"]
        if targets:
            target_request: dict[str, Any] = {"Rule": rule_name, "Targets": targets}
            if "EventBusName" in request:
                target_request["EventBusName"] = request["EventBusName"]
            response = events.put_targets(**target_request)
            if response.get("FailedEntryCount", 0):
                raise StoreError(f"rule {rule_name} refused targets: {response.get('FailedEntries')}")
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot create rule {rule_name}: {exc}") from exc
    logger.info("rule created", extra={"operation": "create_rule", "rule": rule_name, "targets": len(targets)})
    return _Created(ref=rule_name, arn=arn)


def create_tables(
    client: DynamoDBClient,
    names: Mapping[str, str],
    *,
    template: Mapping[str, Any] | None = None,
    timeout_seconds: float = 30.0,
) -> None:
    """Create the declared tables named in ``names`` (logical id -> physical name) and wait until ACTIVE.

    Idempotent: a table that already exists is left as it is (time-to-live is still switched on when
    declared and not yet enabled).

    Args:
        client: a low-level DynamoDB client (pointed at an emulator or at AWS).
        names: physical table name for each logical id to create, e.g. ``{"CatalogTable": "satellite-catalog"}``.
        template: a parsed template; ``template.yaml`` at the repository root by default.
        timeout_seconds: how long to wait for each table to become ACTIVE.

    Raises:
        StoreError: a logical id is not a declared table, a property uses an intrinsic function that
            cannot be resolved locally, DynamoDB refused a call, or a table did not become ACTIVE in time.
    """
    tables = declared_tables(load_template() if template is None else template)
    unknown = sorted(set(names) - set(tables))
    if unknown:
        raise StoreError(
            f"{', '.join(unknown)} not declared as {_TABLE_TYPE} in the template; declared: {sorted(tables)}"
        )
    for logical_id, table_name in names.items():
        properties = tables[logical_id]
        request = _create_request(logical_id, table_name, properties)
        try:
            client.create_table(**request)
            logger.info("table created", extra={"operation": "create_table", "table": table_name})
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise StoreError(f"cannot create table {table_name}: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot create table {table_name}: {exc}") from exc
        _wait_active(client, table_name, timeout_seconds)
        ttl = properties.get("TimeToLiveSpecification")
        if ttl is not None:
            _enable_ttl(client, table_name, _literal(ttl, logical_id, "TimeToLiveSpecification"))


def _literal(value: Any, logical_id: str, where: str) -> Any:
    # Intrinsics are rejected rather than guessed: locally there is no stack to resolve them against.
    if isinstance(value, Intrinsic) or (
        isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("Ref", "Condition")
    ):
        raise StoreError(f"{logical_id}.{where} uses an intrinsic function; declare it as a literal value")
    if isinstance(value, dict):
        if any(key.startswith("Fn::") for key in value):
            raise StoreError(f"{logical_id}.{where} uses an intrinsic function; declare it as a literal value")
        return {key: _literal(item, logical_id, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_literal(item, logical_id, f"{where}[{index}]") for index, item in enumerate(value)]
    return value


def _create_request(logical_id: str, table_name: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    def prop(name: str) -> Any:
        return _literal(properties.get(name), logical_id, name)

    billing_mode = prop("BillingMode") or "PROVISIONED"
    request: dict[str, Any] = {
        "TableName": table_name,
        "KeySchema": prop("KeySchema"),
        "AttributeDefinitions": prop("AttributeDefinitions"),
        "BillingMode": billing_mode,
    }
    if not request["KeySchema"] or not request["AttributeDefinitions"]:
        raise StoreError(f"{logical_id} declares no KeySchema or AttributeDefinitions")
    if billing_mode == "PROVISIONED":
        request["ProvisionedThroughput"] = _throughput(prop("ProvisionedThroughput"))
    gsis = prop("GlobalSecondaryIndexes")
    if gsis:
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index["IndexName"],
                "KeySchema": index["KeySchema"],
                "Projection": index["Projection"],
                **(
                    {"ProvisionedThroughput": _throughput(index.get("ProvisionedThroughput"))}
                    if billing_mode == "PROVISIONED"
                    else {}
                ),
            }
            for index in gsis
        ]
    lsis = prop("LocalSecondaryIndexes")
    if lsis:
        request["LocalSecondaryIndexes"] = [
            {"IndexName": index["IndexName"], "KeySchema": index["KeySchema"], "Projection": index["Projection"]}
            for index in lsis
        ]
    stream = prop("StreamSpecification")
    if stream and stream.get("StreamViewType"):
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
    return request


def _throughput(declared: Mapping[str, Any] | None) -> dict[str, int]:
    # CloudFormation requires throughput in PROVISIONED mode; a missing one only matters locally, so use 5/5.
    declared = declared or {}
    return {
        "ReadCapacityUnits": int(declared.get("ReadCapacityUnits", 5)),
        "WriteCapacityUnits": int(declared.get("WriteCapacityUnits", 5)),
    }


def _wait_active(client: DynamoDBClient, table_name: str, timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            table = client.describe_table(TableName=table_name)["Table"]
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"cannot describe table {table_name}: {exc}") from exc
        indexes = table.get("GlobalSecondaryIndexes") or []
        if table.get("TableStatus") == _ACTIVE and all(i.get("IndexStatus") == _ACTIVE for i in indexes):
            return
        if time.monotonic() >= deadline:
            raise StoreError(f"table {table_name} is not ACTIVE after {timeout_seconds} s")
        time.sleep(0.2)


def _enable_ttl(client: DynamoDBClient, table_name: str, ttl: Mapping[str, Any]) -> None:
    if not ttl.get("Enabled"):
        return
    attribute = str(ttl["AttributeName"])
    try:
        current = client.describe_time_to_live(TableName=table_name).get("TimeToLiveDescription", {})
        if current.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") and current.get("AttributeName") == attribute:
            return
        client.update_time_to_live(
            TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute}
        )
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"cannot enable time-to-live on {table_name}: {exc}") from exc
    logger.info("time-to-live enabled", extra={"operation": "update_time_to_live", "table": table_name})
