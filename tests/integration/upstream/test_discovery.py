from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import pytest

from satellite.config import DiscoveryLimits
from satellite.errors import FailureKind
from satellite.installation import Installation, Transport
from satellite.search.embedding import EMBEDDING_BYTES
from satellite.upstream.discovery import discover, discover_many
from tests.support.upstreams import closed_port_url

if TYPE_CHECKING:
    from satellite.upstream.discovery import DiscoveryReport
    from tests.support.upstreams import ScriptedServer

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
EVERYTHING_TOOLS = 13
EVERYTHING_RESOURCES = 7
EVERYTHING_TEMPLATES = 2


def _installation(url: str, transport: Transport = Transport.STREAMABLE_HTTP, slug: str = "srv") -> Installation:
    return Installation(installation_id=f"i-{slug}", team_id="t1", slug=slug, transport=transport, url=url)


async def _discover(installation: Installation, timeout: float = 10.0, **limits: int) -> DiscoveryReport:
    return await discover(
        installation,
        {},
        limits=DiscoveryLimits(**limits),
        timeout=timeout,
        connect_timeout=2.0,
        now=lambda: NOW,
    )


async def test_discovery_over_streamable_http_finds_every_tool_resource_and_template(everything_http: str) -> None:
    # Given server-everything over Streamable HTTP
    installation = _installation(everything_http)

    # When it is discovered
    report = await _discover(installation)

    # Then the catalog holds exactly what the server exposes, filled by streamable HTTP discovery
    assert report.catalog is not None, report.failure_message
    catalog = report.catalog
    assert len(catalog.tools) == EVERYTHING_TOOLS
    assert len(catalog.resources) == EVERYTHING_RESOURCES
    assert len(catalog.templates) == EVERYTHING_TEMPLATES
    assert catalog.filled_by == "discovery:streamable_http"
    assert catalog.config_hash == installation.config_hash
    assert catalog.discovered_at == NOW
    assert catalog.warnings == ()
    assert report.duration_seconds > 0
    # And each tool's search embedding was computed here, at discovery, not by the gateway per load
    assert all(
        tool.search_embedding is not None and len(tool.search_embedding) == EMBEDDING_BYTES for tool in catalog.tools
    )


async def test_discovery_over_sse_finds_the_same_catalog(everything_sse: str) -> None:
    # Given server-everything over the legacy HTTP+SSE transport
    installation = _installation(everything_sse, Transport.SSE)

    # When it is discovered
    report = await _discover(installation)

    # Then the counts match and the catalog says it was filled over SSE
    assert report.catalog is not None, report.failure_message
    assert len(report.catalog.tools) == EVERYTHING_TOOLS
    assert len(report.catalog.resources) == EVERYTHING_RESOURCES
    assert len(report.catalog.templates) == EVERYTHING_TEMPLATES
    assert report.catalog.filled_by == "discovery:sse"


async def test_every_field_the_server_sent_is_kept_raw(everything_http: str) -> None:
    # Given server-everything, whose tools carry title, annotations, execution and output schemas
    report = await _discover(_installation(everything_http))
    assert report.catalog is not None

    # When the echo and structured-content tools are looked at
    tools = {tool.name: tool.definition for tool in report.catalog.tools}

    # Then wire names and every field are there as the server sent them
    assert tools["echo"]["title"] == "Echo Tool"
    assert tools["echo"]["annotations"]["readOnlyHint"] is True
    assert tools["echo"]["inputSchema"]["required"] == ["message"]
    assert tools["echo"]["execution"] == {"taskSupport": "forbidden"}
    assert "outputSchema" in tools["get-structured-content"]
    template = report.catalog.templates[0].definition
    assert "uriTemplate" in template and "name" in template


async def test_mcp_apps_ui_meta_is_preserved(basic_app: str) -> None:
    # Given the MCP Apps example server
    report = await _discover(_installation(basic_app))

    # When its get-time tool and UI resource are looked at
    assert report.catalog is not None, report.failure_message
    tool = report.catalog.tools[0]
    resource = report.catalog.resources[0].definition

    # Then the tool points at its UI resource through _meta, and the resource keeps its mime type
    assert tool.name == "get-time"
    assert tool.meta is not None
    assert tool.meta["ui"]["resourceUri"] == "ui://get-time/mcp-app.html"
    assert resource["uri"] == "ui://get-time/mcp-app.html"
    assert resource["mimeType"] == "text/html;profile=mcp-app"


async def test_pages_are_followed_and_an_untyped_schema_is_repaired_without_losing_other_tools(
    paged: ScriptedServer,
) -> None:
    # Given a server paging five tools over three pages, one with an inputSchema lacking "type",
    # and no resources capability
    installation = _installation(paged.url)

    # When it is discovered
    report = await _discover(installation)

    # Then all five tools are kept in order, the untyped schema is repaired with a warning naming it,
    # and resources and templates are empty rather than an error
    assert report.catalog is not None, report.failure_message
    catalog = report.catalog
    assert [tool.name for tool in catalog.tools] == ["t1", "t2", "create_issue", "t3", "t4"]
    assert catalog.tools[2].input_schema == {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    }
    assert catalog.tools[3].meta == {"x": 1}
    assert catalog.warnings == ('tool \'create_issue\': the inputSchema has no "type"; added "type": "object"',)
    assert catalog.resources == ()
    assert catalog.templates == ()


async def test_the_page_cap_stops_paging_with_a_warning(paged: ScriptedServer) -> None:
    # Given the three-page server and a cap of two pages
    installation = _installation(paged.url)

    # When it is discovered
    report = await _discover(installation, max_pages=2)

    # Then the first two pages are kept and the cap is reported
    assert report.catalog is not None, report.failure_message
    assert [tool.name for tool in report.catalog.tools] == ["t1", "t2", "create_issue", "t3"]
    assert any("stopped after 2 pages" in warning for warning in report.catalog.warnings)


async def test_resource_lists_answered_with_method_not_found_are_empty(
    resources_unimplemented: ScriptedServer,
) -> None:
    # Given a server announcing resources but answering "method not found" to their lists
    report = await _discover(_installation(resources_unimplemented.url))

    # Then discovery succeeds with its tool and empty resource lists
    assert report.catalog is not None, report.failure_message
    assert [tool.name for tool in report.catalog.tools] == ["only"]
    assert report.catalog.resources == ()
    assert report.catalog.templates == ()


async def test_a_closed_port_is_reported_unreachable() -> None:
    # Given a URL where nothing listens
    url = closed_port_url()

    # When it is discovered
    report = await _discover(_installation(url, slug="github"))

    # Then the failure is unreachable and the message names the server, the URL and what to check
    assert report.catalog is None
    assert report.failure_kind is FailureKind.UNREACHABLE
    assert report.failure_message == f"github: upstream {url} refused the connection (is the server running?)"


async def test_a_server_that_never_answers_is_reported_as_a_timeout_within_the_bound(hanging_url: str) -> None:
    # Given a server that accepts connections and never answers, and a 1.5 s timeout
    started = time.perf_counter()

    # When it is discovered
    report = await _discover(_installation(hanging_url), timeout=1.5)

    # Then discovery gives up as a timeout, promptly
    elapsed = time.perf_counter() - started
    assert report.failure_kind is FailureKind.TIMEOUT
    assert report.failure_message is not None and "did not answer" in report.failure_message
    assert 1.0 <= elapsed < 4.0


async def test_http_401_is_reported_as_an_auth_failure(unauthorized: ScriptedServer) -> None:
    # Given a server answering 401 to everything
    report = await _discover(_installation(unauthorized.url))

    # Then the failure is classified as auth and says to check the credentials
    assert report.failure_kind is FailureKind.AUTH
    assert report.failure_message is not None and "HTTP 401" in report.failure_message
    assert "Authorization" in report.failure_message


async def test_http_401_over_sse_is_reported_as_an_auth_failure(unauthorized: ScriptedServer) -> None:
    # Given the same server reached through the SSE transport
    report = await _discover(_installation(unauthorized.url, Transport.SSE))

    # Then the failure is auth there too
    assert report.failure_kind is FailureKind.AUTH


async def test_an_undefined_header_placeholder_is_reported_without_connecting(everything_http: str) -> None:
    # Given an installation whose Authorization header names an undefined variable
    installation = Installation(
        installation_id="i-x",
        team_id="t1",
        slug="srv",
        transport=Transport.STREAMABLE_HTTP,
        url=everything_http,
        headers={"Authorization": "Bearer ${MISSING_TOKEN}"},
    )

    # When it is discovered
    report = await _discover(installation)

    # Then the report names the missing variable
    assert report.failure_kind is FailureKind.AUTH
    assert report.failure_message is not None and "MISSING_TOKEN" in report.failure_message


async def test_discover_many_returns_the_good_server_promptly_despite_a_dead_and_a_hanging_one(
    everything_http: str, hanging_url: str
) -> None:
    # Given a dead server, a hanging one with a 1.5 s timeout of its own, and a good one
    dead = _installation(closed_port_url(), slug="dead")
    hanging = Installation(
        installation_id="i-hang",
        team_id="t1",
        slug="hang",
        transport=Transport.STREAMABLE_HTTP,
        url=hanging_url,
        timeout_seconds=1.5,
    )
    good = _installation(everything_http, slug="good")

    # When they are discovered together, bounded well above the hanging server's timeout
    with anyio.fail_after(8):
        reports = await discover_many(
            [dead, hanging, good],
            {},
            limits=DiscoveryLimits(),
            timeout=30.0,
            connect_timeout=2.0,
            concurrency=3,
            now=lambda: NOW,
        )

    # Then each gets its own report, in order, and the good one is complete
    assert [report.installation.slug for report in reports] == ["dead", "hang", "good"]
    assert reports[0].failure_kind is FailureKind.UNREACHABLE
    assert reports[1].failure_kind is FailureKind.TIMEOUT
    assert reports[2].catalog is not None
    assert len(reports[2].catalog.tools) == EVERYTHING_TOOLS
    assert reports[2].duration_seconds < reports[1].duration_seconds
