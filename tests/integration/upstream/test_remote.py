from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

import anyio
import pytest

from satellite.errors import FailureKind, UpstreamError
from satellite.installation import Installation, Transport
from satellite.local.processes import free_port
from satellite.upstream.remote import RemoteUpstream
from tests.support.upstreams import closed_port_url, start_everything

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from tests.support.upstreams import ScriptedServer

pytestmark = pytest.mark.anyio


def _installation(
    url: str,
    transport: Transport = Transport.STREAMABLE_HTTP,
    slug: str = "srv",
    headers: Mapping[str, str] | None = None,
) -> Installation:
    return Installation(
        installation_id=f"i-{slug}", team_id="t1", slug=slug, transport=transport, url=url, headers=headers or {}
    )


@pytest.fixture
async def remote() -> AsyncIterator[RemoteUpstream]:
    upstream = RemoteUpstream({"API_KEY": "s3cret"}, call_timeout=10.0, connect_timeout=2.0)
    try:
        yield upstream
    finally:
        await upstream.aclose()


async def test_call_tool_returns_the_upstream_result_unchanged(remote: RemoteUpstream, everything_http: str) -> None:
    # Given server-everything
    installation = _installation(everything_http)

    # When echo is called
    result = await remote.call_tool(installation, "echo", {"message": "hello"})

    # Then the raw result comes back as the server sent it
    assert result == {"content": [{"type": "text", "text": "Echo: hello"}]}


async def test_structured_content_is_returned_unchanged(remote: RemoteUpstream, everything_http: str) -> None:
    # Given a tool answering with structuredContent
    result = await remote.call_tool(_installation(everything_http), "get-structured-content", {"location": "Chicago"})

    # Then the structured content and its text rendering are both there, in wire names
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert set(result["structuredContent"]) == {"temperature", "conditions", "humidity"}


async def test_concurrent_calls_share_one_session_and_each_get_their_own_reply(
    remote: RemoteUpstream, everything_http: str
) -> None:
    # Given one installation
    installation = _installation(everything_http)
    replies: dict[int, str] = {}

    async def call(index: int) -> None:
        result = await remote.call_tool(installation, "echo", {"message": f"m{index}"})
        replies[index] = result["content"][0]["text"]

    # When twenty calls run at once
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            for index in range(20):
                group.start_soon(call, index)

    # Then every call got its own answer over a single pooled session
    assert replies == {index: f"Echo: m{index}" for index in range(20)}
    assert remote.open_sessions == 1


async def test_sse_calls_work_over_the_pool(remote: RemoteUpstream, everything_sse: str) -> None:
    # Given server-everything over SSE
    installation = _installation(everything_sse, Transport.SSE)

    # When two calls are made one after the other
    first = await remote.call_tool(installation, "echo", {"message": "one"})
    second = await remote.call_tool(installation, "get-sum", {"a": 2, "b": 3})

    # Then both are answered over one session
    assert first["content"][0]["text"] == "Echo: one"
    assert "5" in second["content"][0]["text"]
    assert remote.open_sessions == 1


async def test_read_text_and_blob_resources(remote: RemoteUpstream, everything_http: str) -> None:
    # Given the dynamic text and blob resources of server-everything
    installation = _installation(everything_http)

    # When both are read
    text = await remote.read_resource(installation, "demo://resource/dynamic/text/1")
    blob = await remote.read_resource(installation, "demo://resource/dynamic/blob/1")

    # Then the text arrives as text and the blob as base64, with their URIs
    assert text["contents"][0]["uri"] == "demo://resource/dynamic/text/1"
    assert text["contents"][0]["text"].startswith("Resource 1:")
    assert blob["contents"][0]["uri"] == "demo://resource/dynamic/blob/1"
    assert base64.b64decode(blob["contents"][0]["blob"]).startswith(b"Resource 1:")


async def test_a_tool_error_is_returned_as_is_error_unchanged(remote: RemoteUpstream, everything_http: str) -> None:
    # Given a call with arguments the tool rejects
    result = await remote.call_tool(_installation(everything_http), "get-sum", {"a": "not a number"})

    # Then the upstream's isError result comes back, not an exception
    assert result["isError"] is True
    assert "Input validation error" in result["content"][0]["text"]


async def test_header_placeholders_are_sent_resolved(remote: RemoteUpstream, scripted_echo: ScriptedServer) -> None:
    # Given an installation whose header names a variable of the gateway's environment
    installation = _installation(scripted_echo.url, headers={"X-Api-Key": "${API_KEY}", "X-Team": "t1"})

    # When a tool is called
    await remote.call_tool(installation, "echo", {})

    # Then every request carried the resolved value, never the placeholder
    assert scripted_echo.headers_seen
    assert {headers.get("x-api-key") for headers in scripted_echo.headers_seen} == {"s3cret"}
    assert {headers.get("x-team") for headers in scripted_echo.headers_seen} == {"t1"}


async def test_an_unreachable_upstream_raises_an_unreachable_upstream_error(remote: RemoteUpstream) -> None:
    # Given an installation where nothing listens
    url = closed_port_url()

    # When a tool is called
    with pytest.raises(UpstreamError) as caught:
        await remote.call_tool(_installation(url, slug="github"), "echo", {})

    # Then the error is classified and says what to check
    assert caught.value.kind is FailureKind.UNREACHABLE
    assert caught.value.message == f"github: upstream {url} refused the connection (is the server running?)"
    assert remote.open_sessions == 0


async def test_a_hanging_upstream_is_bounded_by_the_call_timeout(hanging_url: str) -> None:
    # Given a pool with a 1 s call timeout and a server that never answers
    upstream = RemoteUpstream({}, call_timeout=1.0, connect_timeout=1.0)
    try:
        # When a tool is called
        with anyio.fail_after(5), pytest.raises(UpstreamError) as caught:
            await upstream.call_tool(_installation(hanging_url), "echo", {})
    finally:
        await upstream.aclose()

    # Then it fails as a timeout
    assert caught.value.kind is FailureKind.TIMEOUT


async def test_auth_failure_raises_an_auth_upstream_error(remote: RemoteUpstream, unauthorized: ScriptedServer) -> None:
    # Given a server answering 401
    with pytest.raises(UpstreamError) as caught:
        await remote.call_tool(_installation(unauthorized.url), "echo", {})

    # Then the error is auth
    assert caught.value.kind is FailureKind.AUTH


async def test_a_broken_session_is_reopened_once_after_the_server_restarts(remote: RemoteUpstream) -> None:
    # Given a pooled session to a server that is then restarted on the same port (its sessions gone)
    port = free_port()
    with start_everything("streamableHttp", port=port) as url:
        installation = _installation(url)
        assert (await remote.call_tool(installation, "echo", {"message": "before"}))["content"][0]["text"]
    with start_everything("streamableHttp", port=port):
        # When the next call goes through the stale pooled session
        result = await remote.call_tool(installation, "echo", {"message": "after"})

    # Then the pool reconnected and the call succeeded
    assert result["content"][0]["text"] == "Echo: after"


async def test_aclose_closes_every_pooled_session(everything_http: str) -> None:
    # Given a pool with an open session
    upstream = RemoteUpstream({}, call_timeout=10.0, connect_timeout=2.0)
    await upstream.call_tool(_installation(everything_http), "echo", {"message": "x"})
    assert upstream.open_sessions == 1

    # When it is closed
    with anyio.fail_after(10):
        await upstream.aclose()

    # Then nothing stays open
    assert upstream.open_sessions == 0


async def test_a_full_pool_evicts_its_least_recently_used_idle_session(everything_http: str) -> None:
    # Given a pool of one session
    upstream = RemoteUpstream({}, call_timeout=10.0, connect_timeout=2.0, max_sessions=1)
    first = Installation(
        installation_id="i-a", team_id="t1", slug="a", transport=Transport.STREAMABLE_HTTP, url=everything_http
    )
    second = Installation(
        installation_id="i-b", team_id="t1", slug="b", transport=Transport.STREAMABLE_HTTP, url=everything_http
    )
    try:
        await upstream.call_tool(first, "echo", {"message": "a"})

        # When a second installation is called
        result = await upstream.call_tool(second, "echo", {"message": "b"})

        # Then it is served and the pool still holds a single session
        assert result["content"][0]["text"] == "Echo: b"
        assert upstream.open_sessions == 1
    finally:
        await upstream.aclose()
