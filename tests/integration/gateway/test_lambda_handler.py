"""The Lambda entry point driven with stored API Gateway HTTP API (v2) events, against moto and a real upstream."""

from __future__ import annotations

import importlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.tables import create_tables
from satellite.config import Settings
from satellite.discovery import discover_and_store
from satellite.installation import Installation, Transport
from tests.support.aws import dynamodb_client, start_moto
from tests.support.upstreams import start_everything

if TYPE_CHECKING:
    from collections.abc import Iterator

EVENTS = Path(__file__).resolve().parents[2] / "events"
TABLE = "satellite-catalog-lambda"


class LambdaContext:
    function_name = "GatewayFunction"
    aws_request_id = "test-request"
    memory_limit_in_mb = 512

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000


@pytest.fixture(scope="module")
def handler() -> Iterator[Any]:
    with start_moto() as endpoint, start_everything() as url, pytest.MonkeyPatch.context() as patch:
        # Given a catalog with one discovered remote server in the emulator
        client = dynamodb_client(endpoint)
        create_tables(client, {"CatalogTable": TABLE})
        store = DynamoCatalogStore(TABLE, client=client)
        installation = Installation("i-everything", "t1", "everything", Transport.STREAMABLE_HTTP, url=url)
        store.add_installation(installation)
        anyio.run(discover_and_store, store, [installation], Settings(catalog_table=TABLE), lambda: datetime.now(UTC))
        # And the function's environment as the template sets it
        for name, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "SATELLITE_CATALOG_TABLE": TABLE,
            "SATELLITE_TOKENS": json.dumps({"dev-token": {"team": "t1"}}),
        }.items():
            patch.setenv(name, value)
        sys.modules.pop("functions.gateway.app", None)
        module = importlib.import_module("functions.gateway.app")
        yield module.handler
        sys.modules.pop("functions.gateway.app", None)


def invoke(handler: Any, event_name: str) -> dict[str, Any]:
    event = json.loads((EVENTS / event_name).read_text())
    response: dict[str, Any] = handler(event, LambdaContext())
    assert response["statusCode"] == 200, response
    body: dict[str, Any] = json.loads(response["body"])
    return body


def test_initialize_advertises_tools_and_resources(handler: Any) -> None:
    body = invoke(handler, "http_api_initialize.json")
    assert body["result"]["protocolVersion"] == "2025-11-25"
    assert {"tools", "resources"} <= set(body["result"]["capabilities"])


def test_tools_list_returns_the_four_meta_tools(handler: Any) -> None:
    body = invoke(handler, "http_api_tools_list.json")
    assert sorted(tool["name"] for tool in body["result"]["tools"]) == [
        "discover_mcp_tools",
        "execute_mcp_tool",
        "list_mcp_resources",
        "read_mcp_resource",
    ]


def test_tools_call_discovers_the_upstream_echo_tool(handler: Any) -> None:
    body = invoke(handler, "http_api_tools_call_echo.json")
    found = json.loads(body["result"]["content"][0]["text"])
    assert found["tools"][0]["tool_path"] == "everything:echo"


def test_a_second_invocation_reuses_the_warm_process(handler: Any) -> None:
    first = invoke(handler, "http_api_tools_call_echo.json")
    second = invoke(handler, "http_api_tools_call_echo.json")
    assert (
        json.loads(first["result"]["content"][0]["text"])["tools"]
        == json.loads(second["result"]["content"][0]["text"])["tools"]
    )


def test_execute_works_across_invocations_with_a_pooled_upstream_session(handler: Any) -> None:
    # Given the stored tools/call event, carrying an execute call instead
    event = json.loads((EVENTS / "http_api_tools_call_echo.json").read_text())
    call = {"name": "execute_mcp_tool", "arguments": {"tool_path": "everything:echo", "arguments": {"message": "hi"}}}
    event["body"] = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call})
    # When it is invoked three times, as a warm Lambda environment would be
    texts = []
    for _ in range(3):
        response = handler(event, LambdaContext())
        texts.append(json.loads(response["body"])["result"]["content"][0]["text"])
    # Then every invocation reaches the upstream
    assert texts == ["Echo: hi"] * 3
