"""Upstream servers for the upstream client's integration tests, started once per test module."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support.upstreams import (
    ScriptedServer,
    hanging_server,
    start_basic_app,
    start_everything,
    start_scripted,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

# A GitLab-style tool: its inputSchema has properties but no "type", which the SDK's typed client rejects.
UNTYPED_TOOL = {
    "name": "create_issue",
    "description": "Create an issue",
    "inputSchema": {"properties": {"title": {"type": "string"}}, "required": ["title"]},
}
PAGED_TOOLS = [
    [{"name": "t1", "inputSchema": {"type": "object"}}, {"name": "t2", "inputSchema": {"type": "object"}}],
    [UNTYPED_TOOL, {"name": "t3", "inputSchema": {"type": "object"}, "_meta": {"x": 1}}],
    [{"name": "t4", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}],
]


@pytest.fixture(scope="module")
def everything_http() -> Iterator[str]:
    with start_everything("streamableHttp") as url:
        yield url


@pytest.fixture(scope="module")
def everything_sse() -> Iterator[str]:
    with start_everything("sse") as url:
        yield url


@pytest.fixture(scope="module")
def basic_app() -> Iterator[str]:
    with start_basic_app() as url:
        yield url


@pytest.fixture(scope="module")
def hanging_url() -> Iterator[str]:
    with hanging_server() as url:
        yield url


@pytest.fixture(scope="module")
def unauthorized() -> Iterator[ScriptedServer]:
    with start_scripted(ScriptedServer(status=401)) as server:
        yield server


@pytest.fixture(scope="module")
def paged() -> Iterator[ScriptedServer]:
    # Tools only: no resources capability, so resources and templates must come back empty.
    with start_scripted(ScriptedServer(tool_pages=PAGED_TOOLS)) as server:
        yield server


@pytest.fixture(scope="module")
def resources_unimplemented() -> Iterator[ScriptedServer]:
    # Claims resources but answers "method not found" to both resource lists.
    server = ScriptedServer(tool_pages=[[{"name": "only", "inputSchema": {"type": "object"}}]])
    server.capabilities = {"tools": {}, "resources": {}}
    with start_scripted(server) as running:
        yield running


@pytest.fixture
def scripted_echo() -> Iterator[ScriptedServer]:
    with start_scripted(ScriptedServer(tool_pages=[[{"name": "echo", "inputSchema": {"type": "object"}}]])) as server:
        yield server
