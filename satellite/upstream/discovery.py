"""Discovery of upstream servers: page through the lists, sanitise, report.

List pages are fetched raw (see :mod:`satellite.upstream.connection` for why and how) and validated
per item by :mod:`satellite.upstream.sanitise`, so one malformed tool never costs a server its
other tools. Discovery stores nothing: it returns a :class:`DiscoveryReport`.

:func:`discover` opens a session to a remote server; :func:`discover_catalog` runs the same listing
over a session that is already open (the stdio workers discover right after spawning a server).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from satellite.catalog import CachedResource, CachedResourceTemplate, CachedTool, DiscoveredCatalog
from satellite.errors import FailureKind, InvalidInstallation, UpstreamError
from satellite.search import SearchDocument, embed_document
from satellite.upstream.connection import classify_failure, open_session
from satellite.upstream.sanitise import sanitise_resources, sanitise_templates, sanitise_tools

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime

    from satellite.config import DiscoveryLimits
    from satellite.installation import Installation
    from satellite.upstream.connection import UpstreamSession

__all__ = ["DiscoveryReport", "discover", "discover_catalog", "discover_many"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DiscoveryReport:
    """The outcome of discovering one installation: a catalog, or a classified failure.

    Exactly one of ``catalog`` and ``failure_kind`` is set. ``started_at`` is when discovery
    began; ``duration_seconds`` how long it took, success or not.
    """

    installation: Installation
    started_at: datetime
    duration_seconds: float
    catalog: DiscoveredCatalog | None = None
    failure_kind: FailureKind | None = None
    failure_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.catalog is not None


@dataclass(frozen=True, slots=True)
class _Listing:
    method: str
    key: str
    capability: str


_TOOLS = _Listing("tools/list", "tools", "tools")
_RESOURCES = _Listing("resources/list", "resources", "resources")
_TEMPLATES = _Listing("resources/templates/list", "resourceTemplates", "resources")


async def discover(
    installation: Installation,
    environment: Mapping[str, str],
    *,
    limits: DiscoveryLimits,
    timeout: float,
    connect_timeout: float,
    now: Callable[[], datetime],
) -> DiscoveryReport:
    """Discover one remote installation's tools, resources and resource templates.

    Never raises for upstream trouble: a failure (unreachable, timeout, auth, protocol) comes back
    as a report with ``failure_kind`` and a message saying what to do. ``timeout`` bounds the
    whole discovery, connecting included.

    Raises:
        InvalidInstallation: the installation is not a remote one (stdio is discovered by workers).
    """
    if not installation.transport.is_remote:
        raise InvalidInstallation("transport", f"{installation.slug}: stdio installations are discovered by workers")
    started_at = now()
    clock = time.perf_counter()
    try:
        with anyio.fail_after(timeout):
            async with open_session(
                installation, environment, timeout=timeout, connect_timeout=connect_timeout
            ) as upstream:
                catalog = await discover_catalog(upstream, limits, started_at)
    except (UpstreamError, TimeoutError) as exc:
        failure = exc if isinstance(exc, UpstreamError) else classify_failure(exc, installation, "discovery")
        logger.warning(
            "discovery failed",
            extra={
                "operation": "discover",
                "installation_id": installation.installation_id,
                "slug": installation.slug,
                "failure_kind": str(failure.kind),
                "error": failure.message,
            },
        )
        return DiscoveryReport(
            installation,
            started_at,
            time.perf_counter() - clock,
            failure_kind=failure.kind,
            failure_message=failure.message,
        )
    duration = time.perf_counter() - clock
    logger.info(
        "discovery finished",
        extra={
            "operation": "discover",
            "installation_id": installation.installation_id,
            "slug": installation.slug,
            "tools": len(catalog.tools),
            "resources": len(catalog.resources),
            "templates": len(catalog.templates),
            "warnings": len(catalog.warnings),
            "duration_ms": round(duration * 1000),
        },
    )
    return DiscoveryReport(installation, started_at, duration, catalog=catalog)


async def discover_many(
    installations: Sequence[Installation],
    environment: Mapping[str, str],
    *,
    limits: DiscoveryLimits,
    timeout: float,
    connect_timeout: float,
    concurrency: int,
    now: Callable[[], datetime],
) -> list[DiscoveryReport]:
    """Discover several installations in parallel, at most ``concurrency`` at once.

    Reports come back in the order of ``installations``. Each server is bounded by its own
    timeout (``installation.timeout_seconds`` or ``timeout``), so a slow or failing server never
    delays or breaks the others beyond its own bound.

    Raises:
        InvalidInstallation: one of the installations is not a remote one (checked before any I/O).
    """
    for installation in installations:
        if not installation.transport.is_remote:
            raise InvalidInstallation(
                "transport", f"{installation.slug}: stdio installations are discovered by workers"
            )
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    reports: list[DiscoveryReport | None] = [None] * len(installations)

    async def run(index: int, installation: Installation) -> None:
        async with limiter:
            reports[index] = await discover(
                installation,
                environment,
                limits=limits,
                timeout=installation.timeout_seconds or timeout,
                connect_timeout=connect_timeout,
                now=now,
            )

    async with anyio.create_task_group() as group:
        for index, installation in enumerate(installations):
            group.start_soon(run, index, installation)
    return [report for report in reports if report is not None]


async def discover_catalog(
    upstream: UpstreamSession, limits: DiscoveryLimits, started_at: datetime
) -> DiscoveredCatalog:
    """List, sanitise and bound the tools, resources and templates of an open session, as of ``started_at``.

    Raises:
        UpstreamError: a list request failed or ``tools/list`` answered without a ``tools`` list.
    """
    installation = upstream.installation
    warnings: list[str] = []
    raw_tools = await _list_all(upstream, _TOOLS, limits, warnings, optional=False)
    raw_resources = await _list_all(upstream, _RESOURCES, limits, warnings, optional=True)
    raw_templates = await _list_all(upstream, _TEMPLATES, limits, warnings, optional=True)
    tools, tool_warnings = sanitise_tools(raw_tools, limits)
    resources, resource_warnings = sanitise_resources(raw_resources, limits)
    templates, template_warnings = sanitise_templates(raw_templates, limits)
    warnings += tool_warnings + resource_warnings + template_warnings
    transport = installation.transport
    return DiscoveredCatalog(
        config_hash=installation.config_hash,
        transport=transport,
        discovered_at=started_at,
        filled_by=f"discovery:{transport}",
        tools=tuple(
            CachedTool(t, started_at, transport, embed_document(SearchDocument.from_definition(installation.slug, t)))
            for t in tools
        ),
        resources=tuple(CachedResource(r, started_at, transport) for r in resources),
        templates=tuple(CachedResourceTemplate(t, started_at, transport) for t in templates),
        warnings=tuple(warnings),
    )


async def _list_all(
    upstream: UpstreamSession, listing: _Listing, limits: DiscoveryLimits, warnings: list[str], *, optional: bool
) -> list[object]:
    """Every item of one list, following ``nextCursor`` up to ``limits.max_pages`` pages."""
    if getattr(upstream.capabilities, listing.capability) is None:
        return []
    installation = upstream.installation
    where = f"{installation.slug}: upstream {installation.url or installation.command}"
    items: list[object] = []
    cursor: str | None = None
    seen_cursors: set[str] = set()
    for _page in range(limits.max_pages):
        params: dict[str, Any] | None = {"cursor": cursor} if cursor is not None else None
        if optional:
            result = await upstream.request_if_supported(listing.method, params)
            if result is None:
                return []
        else:
            result = await upstream.request(listing.method, params)
        page = result.get(listing.key)
        if not isinstance(page, list):
            raise UpstreamError(
                FailureKind.PROTOCOL, f"{where} answered {listing.method} without a {listing.key!r} list"
            )
        items.extend(page)
        next_cursor = result.get("nextCursor")
        if next_cursor is None:
            return items
        if not isinstance(next_cursor, str) or next_cursor in seen_cursors:
            warnings.append(
                f"{listing.method}: the server sent an invalid or repeated cursor {next_cursor!r}; "
                f"stopped paging with {len(items)} {listing.key}"
            )
            return items
        seen_cursors.add(next_cursor)
        cursor = next_cursor
    warnings.append(
        f"{listing.method}: stopped after {limits.max_pages} pages with {len(items)} {listing.key}; "
        "the server has more (raise SATELLITE_MAX_PAGES to follow them)"
    )
    return items
