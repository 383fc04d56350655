from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from satellite.catalog import (
    CachedResource,
    CachedResourceTemplate,
    CachedTool,
    DiscoveredCatalog,
    InstallationStatus,
    Status,
)
from satellite.config import Identity
from satellite.errors import FailureKind, InvalidInstallation, Unavailable, UnknownResource, UnknownTool, UpstreamError
from satellite.installation import Installation, Transport
from satellite.router import Router
from tests.unit.fakes import MemoryStore, RecordingUpstream

if TYPE_CHECKING:
    from collections.abc import Mapping

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
ALICE = Identity("t1", "alice")


def installation(slug: str, team: str = "t1") -> Installation:
    return Installation(
        installation_id=f"{team}-{slug}",
        team_id=team,
        slug=slug,
        transport=Transport.STREAMABLE_HTTP,
        url=f"http://127.0.0.1:9/{slug}",
    )


def tool(name: str, description: str, **schema_props: str) -> CachedTool:
    schema = {"type": "object", "properties": {k: {"type": v} for k, v in schema_props.items()}}
    return CachedTool({"name": name, "description": description, "inputSchema": schema}, NOW, Transport.STREAMABLE_HTTP)


def seeded() -> tuple[MemoryStore, RecordingUpstream, Router]:
    store = MemoryStore()
    github = installation("github")
    apps = installation("basic-app")
    store.add_installation(github)
    store.add_installation(apps)
    store.replace_catalog(
        "t1",
        github.installation_id,
        DiscoveredCatalog(
            github.config_hash,
            Transport.STREAMABLE_HTTP,
            NOW,
            "discovery:streamable_http",
            tools=(
                tool("create_issue", "Create a new issue in a GitHub repository. Long text follows.", repo="string"),
                tool("list_pull_requests", "List pull requests in a repository", repo="string"),
            ),
        ),
    )
    app_tool = CachedTool(
        {"name": "get-time", "description": "Get the time", "_meta": {"ui": {"resourceUri": "ui://get-time/app.html"}}},
        NOW,
        Transport.STREAMABLE_HTTP,
    )
    resource = CachedResource(
        {"uri": "ui://get-time/app.html", "name": "app", "_meta": {"ui/resourceUri": "ui://get-time/app.html"}},
        NOW,
        Transport.STREAMABLE_HTTP,
    )
    template = CachedResourceTemplate({"uriTemplate": "test://{id}", "name": "t"}, NOW, Transport.STREAMABLE_HTTP)
    store.replace_catalog(
        "t1",
        apps.installation_id,
        DiscoveredCatalog(
            apps.config_hash,
            Transport.STREAMABLE_HTTP,
            NOW,
            "discovery:streamable_http",
            tools=(app_tool,),
            resources=(resource,),
            templates=(template,),
        ),
    )
    upstream = RecordingUpstream()
    router = Router(store, {Transport.STREAMABLE_HTTP: upstream})
    return store, upstream, router


async def test_discover_returns_paths_signatures_scores_and_rewritten_meta() -> None:
    _, _, router = seeded()
    # When searching for an issue tool
    response = await router.discover(ALICE, "create github issue", 5)
    # Then the best hit is github:create_issue with a compact signature and a score in [0, 1]
    best = response["tools"][0]
    assert best["tool_path"] == "github:create_issue"
    assert best["signature"] == "create_issue(repo?: string)"
    assert best["description"] == "Create a new issue in a GitHub repository."
    assert best["server"] == "github" and best["transport"] == "streamable_http"
    assert 0 <= best["score"] <= 1
    assert response["total_found"] >= 1 and response["search_time_ms"] >= 0
    # And an MCP Apps tool carries its namespaced resource URI
    app = (await router.discover(ALICE, "get time", 5))["tools"][0]
    assert app["_meta"] == {"ui": {"resourceUri": "basic-app|ui://get-time/app.html"}}


async def test_meaningless_query_gets_guidance() -> None:
    _, _, router = seeded()
    response = await router.discover(ALICE, "   ", 5)
    assert response["tools"] == [] and "Describe what you want to do" in response["guidance"]


async def test_catalog_is_reloaded_only_when_the_version_moves() -> None:
    store, _, router = seeded()
    await router.discover(ALICE, "issue", 5)
    await router.discover(ALICE, "pull requests", 5)
    assert store.loads == 1
    store.set_status("t1", "t1-github", InstallationStatus(Status.OFFLINE, NOW, last_error="connection refused"))
    response = await router.discover(ALICE, "create github issue", 5)
    assert store.loads == 2
    # And an offline server's tools are left out
    assert all(hit["server"] != "github" for hit in response["tools"])


async def test_execute_routes_to_the_upstream_with_the_arguments() -> None:
    _, upstream, router = seeded()
    result = await router.execute(ALICE, "github:create_issue", {"repo": "a/b"})
    assert upstream.calls == [("github", "create_issue", {"repo": "a/b"})]
    assert result["structuredContent"] == {"ok": True}


async def test_unknown_paths_name_the_closest_ones() -> None:
    _, _, router = seeded()
    with pytest.raises(UnknownTool) as info:
        await router.execute(ALICE, "github:create_isue", {})
    assert info.value.suggestions[0] == "github:create_issue"
    with pytest.raises(UnknownTool) as unknown_server:
        await router.execute(ALICE, "gitlab:create_issue", {})
    assert "github:create_issue" in unknown_server.value.suggestions
    with pytest.raises(InvalidInstallation):
        await router.execute(ALICE, "no-colon", {})


async def test_offline_servers_are_blocked_with_their_last_error() -> None:
    store, upstream, router = seeded()
    store.set_status("t1", "t1-github", InstallationStatus(Status.OFFLINE, NOW, last_error="connection refused"))
    with pytest.raises(Unavailable, match="offline since .*connection refused"):
        await router.execute(ALICE, "github:create_issue", {})
    assert upstream.calls == []


async def test_upstream_failures_propagate_as_upstream_errors() -> None:
    store, _, _ = seeded()
    failing = Router(store, {Transport.STREAMABLE_HTTP: RecordingUpstream(UpstreamError(FailureKind.TIMEOUT, "slow"))})
    with pytest.raises(UpstreamError):
        await failing.execute(ALICE, "github:create_issue", {})


async def test_resources_are_namespaced_and_reads_are_proxied_every_time() -> None:
    _, upstream, router = seeded()
    listing = await router.list_resources(ALICE)
    assert listing["total_resources"] == 1 and listing["total_templates"] == 1
    assert listing["resources"][0]["uri"] == "basic-app|ui://get-time/app.html"
    assert listing["resources"][0]["_meta"] == {"ui/resourceUri": "basic-app|ui://get-time/app.html"}
    assert listing["resource_templates"][0]["uriTemplate"] == "basic-app|test://{id}"
    for _ in range(2):
        await router.read_resource(ALICE, "basic-app|ui://get-time/app.html")
    assert upstream.reads == [("basic-app", "ui://get-time/app.html")] * 2
    with pytest.raises(UnknownResource):
        await router.read_resource(ALICE, "nope|ui://x")


async def test_teams_never_see_each_other() -> None:
    store, _, router = seeded()
    other = Identity("t2")
    assert (await router.discover(other, "create github issue", 5))["tools"] == []
    with pytest.raises(UnknownTool):
        await router.execute(other, "github:create_issue", {})
    assert store.catalog_version("t2") == 0


async def test_a_server_added_after_the_view_was_cached_is_routed_with_the_fresh_view() -> None:
    # Given a router that already cached alice's view
    store, upstream, router = seeded()
    await router.discover(ALICE, "issue", 5)
    # When a new server is installed and discovered, then called at once
    jira = installation("jira")
    store.add_installation(jira)
    discovered = DiscoveredCatalog(
        jira.config_hash, Transport.STREAMABLE_HTTP, NOW, "test", tools=(tool("create_ticket", "Create a ticket"),)
    )
    store.replace_catalog("t1", jira.installation_id, discovered)
    await router.execute(ALICE, "jira:create_ticket", {})
    # Then the call reached it
    assert upstream.calls[-1] == ("jira", "create_ticket", {})


class GatedStore(MemoryStore):
    """A store whose version check finishes only once the upstream call has started (or 2 s pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.check_saw_call: list[bool] = []

    def catalog_version(self, team_id: str) -> int:
        if self.loads:
            self.check_saw_call.append(self.gate.wait(timeout=2))
        return super().catalog_version(team_id)


class GateOpeningUpstream(RecordingUpstream):
    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    async def call_tool(self, installation: Installation, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        self.gate.set()
        return await super().call_tool(installation, name, arguments)


async def test_the_version_check_runs_alongside_the_upstream_call_not_before_it() -> None:
    # Given a warm view and a version check that can only finish after the upstream call started
    seeded_store, _, _ = seeded()
    store = GatedStore()
    store.entries, store.versions = seeded_store.entries, seeded_store.versions
    upstream = GateOpeningUpstream(store.gate)
    router = Router(store, {Transport.STREAMABLE_HTTP: upstream})
    await router.view(ALICE)
    # When a tool is executed
    with anyio.fail_after(10):
        await router.execute(ALICE, "github:create_issue", {"repo": "a/b"})
    # Then the check was still running when the call started
    assert store.check_saw_call == [True]


async def test_with_a_check_interval_the_version_is_checked_at_most_that_often_but_misses_always_check() -> None:
    # Given a router that checks the version at most every 10 s of its clock
    store, upstream, _ = seeded()
    now = [0.0]
    router = Router(store, {Transport.STREAMABLE_HTTP: upstream}, check_interval=10.0, clock=lambda: now[0])
    await router.view(ALICE)
    # When a server goes offline within the interval, the cached view still routes to it
    store.set_status("t1", "t1-github", InstallationStatus(Status.OFFLINE, NOW, last_error="gone"))
    await router.execute(ALICE, "github:create_issue", {})
    assert len(upstream.calls) == 1
    # Then once the interval passed, a call checks alongside and the call after it sees the server offline
    now[0] = 11.0
    await router.execute(ALICE, "github:create_issue", {})
    assert len(upstream.calls) == 2
    with pytest.raises(Unavailable):
        await router.execute(ALICE, "github:create_issue", {})
    # And a server added within the interval is routed at once (a miss forces a check)
    jira = installation("jira")
    store.add_installation(jira)
    discovered = DiscoveredCatalog(jira.config_hash, Transport.STREAMABLE_HTTP, NOW, "t", tools=(tool("t", "d"),))
    store.replace_catalog("t1", jira.installation_id, discovered)
    await router.execute(ALICE, "jira:t", {})
    assert upstream.calls[-1][0] == "jira"
