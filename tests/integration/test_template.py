"""Rules every resource in template.yaml must follow, written generically so resources added later are covered too.

Each rule is a function from a parsed template to the offending resources; the real template must yield none, and a
small template that breaks the rule shows the rule can fail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM_MAKEFILE = ROOT / "infra" / "sam.mk"
EVENTS = ROOT / "tests" / "events"

API_GATEWAY_TIMEOUT_SECONDS = 30
LAMBDA_DEFAULT_TIMEOUT_SECONDS = 3
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
PIP_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}
# SAM policy templates that cannot modify a table's items whatever table they are given.
READ_ONLY_POLICY_TEMPLATES = frozenset({"DynamoDBReadPolicy", "DynamoDBStreamReadPolicy"})
READ_ONLY_DYNAMODB_ACTIONS = re.compile(
    r"^dynamodb:(Get|BatchGet|Query|Scan|Describe|List|ConditionCheckItem|PartiQLSelect)", re.IGNORECASE
)


class _CloudFormationLoader(yaml.SafeLoader):
    """YAML loader that reads CloudFormation short-form tags (``!Ref``, ``!GetAtt``, ``!Sub``...) as long form."""


def _construct_intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if tag_suffix in ("Ref", "Condition"):
        return {tag_suffix: value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value.split(".", 1)}
    return {f"Fn::{tag_suffix}": value}


_CloudFormationLoader.add_multi_constructor("!", _construct_intrinsic)


def _load(text: str) -> dict[str, Any]:
    template: dict[str, Any] = yaml.load(text, Loader=_CloudFormationLoader)
    return template


def _deployed_template() -> dict[str, Any]:
    return _load(TEMPLATE.read_text(encoding="utf-8"))


def _resources(template: dict[str, Any], *types: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in template.get("Resources", {}).items() if res.get("Type") in types}


def _function_properties(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each function's properties with SAM's Globals applied (globals only reach AWS::Serverless::Function)."""
    globals_ = template.get("Globals", {}).get("Function", {})
    merged: dict[str, dict[str, Any]] = {}
    for name, res in _resources(template, *FUNCTION_TYPES).items():
        base = globals_ if res["Type"] == "AWS::Serverless::Function" else {}
        merged[name] = {**base, **res.get("Properties", {})}
    return merged


def _mentions(value: Any, logical_id: str) -> bool:
    """Whether an intrinsic-function value refers to the resource ``logical_id`` (Ref, GetAtt or Sub)."""
    if isinstance(value, dict):
        if value.get("Ref") == logical_id:
            return True
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att and get_att[0] == logical_id:
            return True
        sub = value.get("Fn::Sub")
        sub_text = sub[0] if isinstance(sub, list) and sub else sub
        if isinstance(sub_text, str) and re.search(r"\$\{" + re.escape(logical_id) + r"[.}]", sub_text):
            return True
        return any(_mentions(v, logical_id) for v in value.values())
    if isinstance(value, list):
        return any(_mentions(v, logical_id) for v in value)
    return False


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _resolve_number(template: dict[str, Any], value: Any) -> float:
    """A number, or the largest value a referenced parameter may take (its MaxValue, else its Default)."""
    if isinstance(value, dict) and "Ref" in value:
        parameter = template.get("Parameters", {})[value["Ref"]]
        return float(parameter.get("MaxValue", parameter["Default"]))
    return float(value)


# --- rules -------------------------------------------------------------------------------------------------------


def queues_without_dead_letter_queue(template: dict[str, Any]) -> list[str]:
    """Queues that neither redrive to a dead-letter queue nor serve as one."""
    queues = _resources(template, "AWS::SQS::Queue")
    targets = [q.get("Properties", {}).get("RedrivePolicy", {}).get("deadLetterTargetArn") for q in queues.values()]
    dead_letter_queues = {name for name in queues if any(_mentions(t, name) for t in targets if t)}
    return sorted(
        name
        for name, queue in queues.items()
        if name not in dead_letter_queues
        and not queue.get("Properties", {}).get("RedrivePolicy", {}).get("deadLetterTargetArn")
    )


def function_timeouts(template: dict[str, Any]) -> dict[str, float]:
    """Each function's effective timeout in seconds (Globals and Lambda's 3 s default applied)."""
    return {
        name: _resolve_number(template, props.get("Timeout", LAMBDA_DEFAULT_TIMEOUT_SECONDS))
        for name, props in _function_properties(template).items()
    }


def api_facing_functions(template: dict[str, Any]) -> set[str]:
    """Functions API Gateway invokes (an ``HttpApi`` or ``Api`` event): they must answer before it gives up."""
    return {
        name
        for name, props in _function_properties(template).items()
        if any(event.get("Type") in ("HttpApi", "Api") for event in props.get("Events", {}).values())
    }


def _statement_writes(statement: dict[str, Any], table: str) -> bool:
    if statement.get("Effect", "Allow") != "Allow":
        return False
    resources = _as_list(statement.get("Resource", []))
    if not any(r == "*" or _mentions(r, table) for r in resources):
        return False
    actions = [a for a in _as_list(statement.get("Action", [])) if isinstance(a, str)]
    return any(
        a == "*" or (a.lower().startswith("dynamodb:") and not READ_ONLY_DYNAMODB_ACTIONS.match(a)) for a in actions
    )


def _managed_policy_writes(policy: Any) -> bool:
    text = json.dumps(policy)
    return ("DynamoDB" in text and "ReadOnly" not in text) or "AdministratorAccess" in text or "PowerUser" in text


def table_write_grants(template: dict[str, Any], function: str, table: str) -> list[str]:
    """Descriptions of every grant that lets ``function`` write items of ``table``."""
    resources = template.get("Resources", {})
    props = _function_properties(template)[function]
    grants: list[str] = []
    documents: list[dict[str, Any]] = []
    for policy in _as_list(props.get("Policies", [])):
        if isinstance(policy, dict) and "Statement" in policy:
            documents.append(policy)
        elif isinstance(policy, dict) and len(policy) == 1:
            ((name, parameters),) = policy.items()
            if name not in READ_ONLY_POLICY_TEMPLATES and _mentions(parameters, table):
                grants.append(f"policy template {name}")
        elif _managed_policy_writes(policy):
            grants.append(f"managed policy {policy}")
    role = props.get("Role")
    role_name = (role.get("Ref") or role.get("Fn::GetAtt", [None])[0]) if isinstance(role, dict) else None
    if role_name in resources:
        role_props = resources[role_name].get("Properties", {})
        documents.extend(p.get("PolicyDocument", {}) for p in role_props.get("Policies", []))
        grants.extend(
            f"managed policy {p}" for p in role_props.get("ManagedPolicyArns", []) if _managed_policy_writes(p)
        )
    for document in documents:
        grants.extend(
            f"statement {s.get('Action')}"
            for s in _as_list(document.get("Statement", []))
            if _statement_writes(s, table)
        )
    connectors = [
        {"Source": {"Id": function}, **c.get("Properties", {})}
        for c in resources.get(function, {}).get("Connectors", {}).values()
    ]
    connectors += [c.get("Properties", {}) for c in _resources(template, "AWS::Serverless::Connector").values()]
    for connector in connectors:
        destinations = _as_list(connector.get("Destination", []))
        if (
            connector.get("Source", {}).get("Id") == function
            and any(d.get("Id") == table for d in destinations)
            and "Write" in connector.get("Permissions", [])
        ):
            grants.append("connector with Write")
    return grants


def http_api_routes(template: dict[str, Any], api: str) -> set[str]:
    """Route keys (``METHOD /path``) the HTTP API ``api`` serves."""
    routes: set[str] = set()
    for props in _function_properties(template).values():
        for event in props.get("Events", {}).values():
            event_props = event.get("Properties", {})
            if event.get("Type") == "HttpApi" and _mentions(event_props.get("ApiId"), api):
                routes.add(f"{event_props.get('Method', 'ANY').upper()} {event_props.get('Path', '$default')}")
    for route in _resources(template, "AWS::ApiGatewayV2::Route").values():
        if _mentions(route.get("Properties", {}).get("ApiId"), api):
            routes.add(route["Properties"]["RouteKey"])
    body = template.get("Resources", {}).get(api, {}).get("Properties", {}).get("DefinitionBody", {})
    for path, methods in body.get("paths", {}).items():
        routes.update(f"{method.upper()} {path}" for method in methods)
    return routes


# --- tests -------------------------------------------------------------------------------------------------------


def test_every_queue_has_a_dead_letter_queue() -> None:
    # Given the deployment template
    template = _deployed_template()

    # When queues are checked for a redrive policy
    offenders = queues_without_dead_letter_queue(template)

    # Then every queue that is not itself a dead-letter queue redrives to one
    assert offenders == []


def test_dead_letter_rule_flags_a_queue_without_redrive() -> None:
    # Given a queue with a dead-letter queue and a queue without one
    template = _load(
        """
Resources:
  Requests:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt RequestsDlq.Arn, maxReceiveCount: 3}
  RequestsDlq:
    Type: AWS::SQS::Queue
  Replies:
    Type: AWS::SQS::Queue
"""
    )

    # When queues are checked
    offenders = queues_without_dead_letter_queue(template)

    # Then only the queue without a redrive policy is reported; the dead-letter queue itself is exempt
    assert offenders == ["Replies"]


def test_every_api_facing_function_finishes_before_api_gateway_gives_up() -> None:
    # Given the deployment template
    template = _deployed_template()

    # When the effective timeouts of the functions API Gateway invokes are computed
    api_facing = api_facing_functions(template)
    timeouts = {name: t for name, t in function_timeouts(template).items() if name in api_facing}

    # Then the gateway is among them and each stops before API Gateway's 30 s limit (queue-driven and scheduled
    # functions such as discovery may run longer)
    assert "GatewayFunction" in timeouts
    assert {name: t for name, t in timeouts.items() if t >= API_GATEWAY_TIMEOUT_SECONDS} == {}


def test_api_facing_rule_selects_functions_with_api_events_only() -> None:
    # Given an HTTP API function, a REST API function, a queue consumer with a long timeout and a bare function
    template = _load(
        """
Resources:
  Http:
    Type: AWS::Serverless::Function
    Properties: {Events: {Post: {Type: HttpApi, Properties: {Path: /mcp, Method: POST}}}}
  Rest:
    Type: AWS::Serverless::Function
    Properties: {Events: {Get: {Type: Api, Properties: {Path: /x, Method: GET}}}}
  Consumer:
    Type: AWS::Serverless::Function
    Properties: {Timeout: 360, Events: {Requests: {Type: SQS, Properties: {Queue: arn}}}}
  Bare: {Type: AWS::Lambda::Function, Properties: {}}
"""
    )

    # When the API-facing functions are selected / Then only the two API-triggered ones are
    assert api_facing_functions(template) == {"Http", "Rest"}


def test_timeout_rule_applies_globals_defaults_and_parameter_maxima() -> None:
    # Given functions that take their timeout from Globals, their own property, Lambda's default and a parameter
    template = _load(
        """
Parameters:
  Seconds: {Type: Number, Default: 20, MaxValue: 60}
Globals:
  Function:
    Timeout: 45
Resources:
  FromGlobals: {Type: AWS::Serverless::Function, Properties: {}}
  Own: {Type: AWS::Serverless::Function, Properties: {Timeout: 10}}
  Plain: {Type: AWS::Lambda::Function, Properties: {}}
  FromParameter: {Type: AWS::Serverless::Function, Properties: {Timeout: !Ref Seconds}}
"""
    )

    # When effective timeouts are computed
    timeouts = function_timeouts(template)

    # Then each source is honoured, and a parameter counts with the largest value it accepts
    assert timeouts == {"FromGlobals": 45, "Own": 10, "Plain": 3, "FromParameter": 60}


def test_background_functions_cannot_write_each_others_tables() -> None:
    # Given the deployment template
    template = _deployed_template()

    # When the write grants of discovery and the metadata batcher are inspected
    # Then discovery never writes metadata and the batcher never writes the catalog
    assert table_write_grants(template, "DiscoveryFunction", "MetadataTable") == []
    assert table_write_grants(template, "MetadataFunction", "CatalogTable") == []


def test_write_rule_flags_every_kind_of_write_grant() -> None:
    # Given a function granted reads (allowed) and writes through a template, a statement, a managed policy,
    # and a connector
    template = _load(
        """
Resources:
  Table: {Type: AWS::DynamoDB::Table}
  Fn:
    Type: AWS::Serverless::Function
    Connectors:
      ToTable: {Properties: {Destination: {Id: Table}, Permissions: [Read, Write]}}
    Properties:
      Policies:
        - DynamoDBReadPolicy: {TableName: !Ref Table}
        - DynamoDBCrudPolicy: {TableName: !Ref Table}
        - Statement:
            - {Effect: Allow, Action: [dynamodb:GetItem, dynamodb:Query], Resource: !GetAtt Table.Arn}
            - {Effect: Allow, Action: dynamodb:PutItem, Resource: !Sub "${Table.Arn}"}
        - AmazonDynamoDBFullAccess
"""
    )

    # When the function's write grants on the table are inspected
    grants = table_write_grants(template, "Fn", "Table")

    # Then each write grant is reported and the reads are not
    assert grants == [
        "policy template DynamoDBCrudPolicy",
        "managed policy AmazonDynamoDBFullAccess",
        "statement dynamodb:PutItem",
        "connector with Write",
    ]


def test_http_api_serves_the_mcp_endpoint() -> None:
    # Given the deployment template
    template = _deployed_template()

    # When the HTTP API's routes are collected
    routes = http_api_routes(template, "HttpApi")

    # Then MCP clients can POST to /mcp
    assert "POST /mcp" in routes


def test_stored_http_api_events_use_declared_routes() -> None:
    # Given the stored API Gateway HTTP API events and the template's routes
    events = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(EVENTS.glob("http_api_*.json"))]
    routes = http_api_routes(_deployed_template(), "HttpApi")

    # When their route keys are compared with the template
    undeclared = [e["routeKey"] for e in events if e["routeKey"] not in routes]

    # Then every event is a payload v2 event for a route the API really has
    assert len(events) >= 3
    assert {e["version"] for e in events} == {"2.0"}
    assert undeclared == []


def test_package_wheels_match_function_architecture() -> None:
    # Given the architecture sam.mk installs wheels for
    match = re.search(r"^SAM_PIP_ARCH\s*:?=\s*(\S+)", SAM_MAKEFILE.read_text(encoding="utf-8"), re.MULTILINE)
    assert match is not None

    # When each function's architecture is read from the template
    architectures = {
        name: props.get("Architectures", ["x86_64"])[0]
        for name, props in _function_properties(_deployed_template()).items()
    }

    # Then every function runs on the architecture its native wheels were built for
    assert {name: a for name, a in architectures.items() if PIP_ARCH[a] != match.group(1)} == {}
