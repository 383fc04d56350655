"""Create the DynamoDB tables declared in ``template.yaml``, so local and deployed stacks cannot drift.

The template is the single declaration: this module reads every ``AWS::DynamoDB::Table`` resource and
creates it with the same key schema, attribute definitions, indexes, billing mode and time-to-live. Other
resource types are ignored. Settings that change nothing an emulator does (point-in-time recovery,
encryption, deletion policies) are not applied.
"""

from __future__ import annotations

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

__all__ = ["DEFAULT_TEMPLATE", "Intrinsic", "create_tables", "declared_tables", "load_template"]

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
_TABLE_TYPE = "AWS::DynamoDB::Table"
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


def declared_tables(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``Properties`` of every ``AWS::DynamoDB::Table`` resource, by logical id."""
    resources = template.get("Resources") or {}
    return {
        logical_id: dict(resource.get("Properties") or {})
        for logical_id, resource in resources.items()
        if isinstance(resource, dict) and resource.get("Type") == _TABLE_TYPE
    }


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
