"""The hierarchical router: the four meta-tools, written against ports.

``discover_mcp_tools`` ranks the caller's catalog; ``execute_mcp_tool`` and ``read_mcp_resource``
route to the installation's upstream; ``list_mcp_resources`` lists cached resource metadata.
A warm router keeps each caller's catalog and search index in memory and checks the team's
catalog version (one small item) per request, reloading only when it moved. With a check interval
(``SATELLITE_CATALOG_CHECK_INTERVAL_MS``) it checks at most that often, except that a call the cached
view cannot route always checks first: a new server is reachable at once, a removed one may take one
more call within the interval to disappear.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from rapidfuzz import fuzz, process

from satellite.catalog import (
    CachedTool,
    InstallationCatalog,
    TeamCatalog,
    format_resource_uri,
    format_tool_path,
    parse_resource_uri,
    parse_tool_path,
    rewrite_ui_meta,
)
from satellite.errors import NotFound, SatelliteError, Unavailable, UnknownResource, UnknownTool
from satellite.search import SearchDocument, SearchIndex, is_meaningful_query
from satellite.signature import render_signature

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from satellite.config import Identity
    from satellite.installation import Transport
    from satellite.ports import CatalogStore, Upstream

__all__ = ["MAX_DISCOVER_LIMIT", "Router"]

logger = logging.getLogger(__name__)
_R = TypeVar("_R")

MAX_DISCOVER_LIMIT = 50
DEFAULT_DISCOVER_LIMIT = 10
SHORT_DESCRIPTION_CHARS = 160
SUGGESTIONS = 3
QUERY_GUIDANCE = (
    "Describe what you want to do in a few words, e.g. 'create a github issue', 'read a file' or "
    "'current time in Tokyo'. Server names work too, e.g. 'github'."
)


@dataclass(frozen=True, slots=True)
class _View:
    """One caller's catalog at one version, with its search index over serving installations."""

    version: int
    catalog: TeamCatalog
    index: SearchIndex
    tools: Mapping[str, tuple[InstallationCatalog, CachedTool]]


class Router:
    """The four meta-tools over one catalog store and the upstreams, one per transport."""

    def __init__(
        self,
        store: CatalogStore,
        upstreams: Mapping[Transport, Upstream],
        *,
        check_interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._upstreams = dict(upstreams)
        self._check_interval = check_interval
        self._clock = clock
        self._views: dict[tuple[str, str | None], _View] = {}
        self._checked_at: dict[tuple[str, str | None], float] = {}

    async def view(self, identity: Identity) -> TeamCatalog:
        """The caller's catalog, reloaded only when the team's catalog version moved."""
        return (await self._view(identity)).catalog

    async def discover(self, identity: Identity, query: str, limit: int = DEFAULT_DISCOVER_LIMIT) -> dict[str, Any]:
        """Rank the caller's serving tools for ``query``; see the module docstring of ``satellite.search``.

        ``total_found`` counts tools with any relevance (at most 50); ``search_time_ms`` is the ranking alone.
        """
        limit = max(1, min(int(limit), MAX_DISCOVER_LIMIT))
        if not is_meaningful_query(query):
            return {"query": query, "tools": [], "total_found": 0, "search_time_ms": 0.0, "guidance": QUERY_GUIDANCE}
        view = await self._view(identity)
        started = time.perf_counter()
        hits = view.index.search(query, MAX_DISCOVER_LIMIT)
        tools = [_hit(*view.tools[hit.path], hit.score) for hit in hits[:limit]]
        response: dict[str, Any] = {
            "query": query,
            "tools": tools,
            "total_found": len(hits),
            "search_time_ms": round((time.perf_counter() - started) * 1000, 2),
        }
        if not tools:
            response["guidance"] = f"No tool matched. {QUERY_GUIDANCE}"
        return response

    async def execute(self, identity: Identity, tool_path: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run one upstream tool and return its result unchanged.

        Raises:
            InvalidInstallation: ``tool_path`` is not ``server:tool``.
            UnknownTool: no such server or tool (the error names the closest paths).
            Unavailable: the server is offline, disabled or in error.
            UpstreamError: the upstream failed.
        """
        slug, name = parse_tool_path(tool_path)

        def route(catalog: TeamCatalog) -> tuple[Upstream, InstallationCatalog]:
            entry = self._installation(catalog, slug, tool_path)
            upstream = self._upstream(entry)
            if entry.tool(name) is None:
                suggestions = _closest(tool_path, catalog.tool_paths([entry]) or catalog.tool_paths())
                raise UnknownTool(f"server {slug!r} has no tool {name!r}", suggestions)
            return upstream, entry

        return await self._routed(identity, route, lambda up, entry: up.call_tool(entry.installation, name, arguments))

    async def list_resources(self, identity: Identity) -> dict[str, Any]:
        """Every cached resource and template of the caller's serving installations, namespaced."""
        catalog = await self.view(identity)
        resources: list[dict[str, Any]] = []
        templates: list[dict[str, Any]] = []
        for entry in catalog.serving():
            for resource in entry.resources:
                resources.append(_namespaced(resource.definition, "uri", entry))
            for template in entry.templates:
                templates.append(_namespaced(template.definition, "uriTemplate", entry))
        return {
            "resources": resources,
            "resource_templates": templates,
            "total_resources": len(resources),
            "total_templates": len(templates),
        }

    async def read_resource(self, identity: Identity, namespaced_uri: str) -> dict[str, Any]:
        """Proxy ``resources/read`` to the origin server (never cached).

        Raises:
            InvalidInstallation: ``namespaced_uri`` is not ``server|uri``.
            UnknownResource: no such server.
            Unavailable: the server is offline, disabled or in error.
            UpstreamError: the upstream failed.
        """
        slug, uri = parse_resource_uri(namespaced_uri)

        def route(catalog: TeamCatalog) -> tuple[Upstream, InstallationCatalog]:
            try:
                entry = catalog.by_slug(slug)
            except NotFound as exc:
                known = [format_resource_uri(e.slug, r.uri) for e in catalog.installations for r in e.resources]
                raise UnknownResource(f"no server {slug!r} is installed", _closest(namespaced_uri, known)) from exc
            return self._upstream(entry), entry

        return await self._routed(identity, route, lambda up, entry: up.read_resource(entry.installation, uri))

    async def _routed(
        self,
        identity: Identity,
        route: Callable[[TeamCatalog], tuple[Upstream, InstallationCatalog]],
        act: Callable[[Upstream, InstallationCatalog], Awaitable[_R]],
    ) -> _R:
        """Route with the caller's cached view and act, while the catalog version check runs alongside.

        The check never delays a call that the cached view can route; when the cached view cannot
        route it (a server or tool added, re-enabled or recovered since), the check's fresh view decides.
        The fresh view serves the next request either way.
        """
        key = (identity.team_id, identity.user_id)
        cached = self._views.get(key)
        if cached is None:
            return await act(*route((await self._view(identity)).catalog))
        background = self._check_due(key)
        checked = anyio.Event()
        fresh: list[_View | SatelliteError] = []
        outcome: list[_R] = []
        failure: list[SatelliteError] = []

        async def check() -> None:
            try:
                fresh.append(await self._view(identity))
            except SatelliteError as exc:
                fresh.append(exc)
            checked.set()

        async def fresh_view() -> _View:
            if not background:
                return await self._view(identity, force=True)
            await checked.wait()
            view = fresh[0]
            if isinstance(view, SatelliteError):
                raise view
            return view

        async def attempt() -> None:
            try:
                try:
                    target = route(cached.catalog)
                except (NotFound, Unavailable):
                    view = await fresh_view()
                    if view is cached:
                        raise
                    target = route(view.catalog)
                outcome.append(await act(*target))
            except SatelliteError as exc:
                failure.append(exc)

        async with anyio.create_task_group() as group:
            if background:
                group.start_soon(check)
            await attempt()
        if failure:
            raise failure[0]
        return outcome[0]

    def _check_due(self, key: tuple[str, str | None]) -> bool:
        last = self._checked_at.get(key)
        return last is None or self._clock() - last >= self._check_interval

    async def _view(self, identity: Identity, *, force: bool = False) -> _View:
        key = (identity.team_id, identity.user_id)
        cached = self._views.get(key)
        if cached is not None and not force and not self._check_due(key):
            return cached
        self._checked_at[key] = self._clock()
        version = await anyio.to_thread.run_sync(self._store.catalog_version, identity.team_id)
        if cached is not None and cached.version == version:
            return cached
        team = await anyio.to_thread.run_sync(self._store.load_catalog, identity.team_id)
        catalog = team.visible_to(identity.user_id)
        tools = {format_tool_path(e.slug, t.name): (e, t) for e in catalog.serving() for t in e.tools}
        index = SearchIndex.build(
            [SearchDocument.from_definition(e.slug, t.definition, t.search_embedding) for e, t in tools.values()]
        )
        view = _View(team.version, catalog, index, tools)
        self._views[key] = view
        logger.info(
            "catalog loaded", extra={"operation": "load_catalog", "team": identity.team_id, "tools": len(index)}
        )
        return view

    @staticmethod
    def _installation(catalog: TeamCatalog, slug: str, tool_path: str) -> InstallationCatalog:
        try:
            return catalog.by_slug(slug)
        except NotFound as exc:
            raise UnknownTool(f"no server {slug!r} is installed", _closest(tool_path, catalog.tool_paths())) from exc

    def _upstream(self, entry: InstallationCatalog) -> Upstream:
        self._ensure_serving(entry)
        upstream = self._upstreams.get(entry.installation.transport)
        if upstream is None:
            raise Unavailable(
                f"server {entry.slug!r} uses {entry.installation.transport}, which this gateway cannot reach"
            )
        return upstream

    @staticmethod
    def _ensure_serving(entry: InstallationCatalog) -> None:
        if not entry.installation.enabled:
            raise Unavailable(f"server {entry.slug!r} is disabled; enable the installation to use it")
        status = entry.status
        if not status.status.serves:
            reason = f": {status.last_error}" if status.last_error else ""
            raise Unavailable(
                f"server {entry.slug!r} is {status.status} since {status.changed_at.isoformat()}{reason}. "
                "Its tools are hidden from discover_mcp_tools until it recovers; try again later."
            )


def _hit(entry: InstallationCatalog, tool: CachedTool, score: float) -> dict[str, Any]:
    hit: dict[str, Any] = {
        "tool_path": format_tool_path(entry.slug, tool.name),
        "description": _short(tool.description),
        "server": entry.slug,
        "transport": str(entry.installation.transport),
        "score": round(score, 3),
        "signature": render_signature(tool.name, tool.input_schema),
    }
    meta = rewrite_ui_meta(tool.meta, entry.slug)
    if meta:
        hit["_meta"] = meta
    return hit


def _short(description: str) -> str:
    """The first sentence or line of a description, bounded, so a discover response stays small."""
    text = " ".join(description.split())
    for stop in (". ", "\n"):
        head, sep, _ = text.partition(stop)
        if sep and len(head) >= 20:
            text = head + "."
            break
    if len(text) > SHORT_DESCRIPTION_CHARS:
        text = text[: SHORT_DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return text


def _closest(target: str, candidates: list[str]) -> tuple[str, ...]:
    matches = process.extract(target, candidates, scorer=fuzz.WRatio, limit=SUGGESTIONS)
    return tuple(match for match, _, _ in matches)


def _namespaced(definition: Mapping[str, Any], key: str, entry: InstallationCatalog) -> dict[str, Any]:
    item = dict(definition)
    item[key] = format_resource_uri(entry.slug, str(definition[key]))
    item["server"] = entry.slug
    if "_meta" in item:
        item["_meta"] = rewrite_ui_meta(item["_meta"], entry.slug)
    return item
