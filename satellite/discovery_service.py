"""The discovery consumer's core: queued discovery requests, and the schedule's rediscovery and recovery.

**Requests.** A batch of :class:`~satellite.discovery_jobs.DiscoveryRequest` is coalesced by installation and
configuration hash, then checked against the catalog: a request is skipped when its installation was removed
or disabled, when its hash is no longer the installation's (a newer request follows), or when that hash was
already discovered after the latest coalesced request asked for it. The rest are discovered together with
bounded concurrency (:func:`satellite.discovery.run_discoveries`), whose claims make sure that a discovery
running elsewhere for the same hash is not repeated.

**Schedule.** :meth:`DiscoveryService.rediscover_due` selects, in every team, the enabled remote installations
that are offline, in error or whose last discovery failed (recovery), that were never discovered, or whose
cache is older than the TTL (stale). With a queue it *enqueues* one request each and returns at once: the
consumer then discovers them in batches with its bounded concurrency, retries and dead-letter queue, and a
scheduled invocation never runs into the function timeout however many servers are due. Without a queue (a
local loop, tests) it discovers them directly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from satellite.catalog import DiscoveryState, Status
from satellite.discovery import DiscoveryJob, OutcomeKind, run_discoveries
from satellite.discovery_jobs import DiscoveryReason, DiscoveryRequest
from satellite.errors import InvalidInstallation

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from satellite.catalog import InstallationCatalog, TeamCatalog
    from satellite.config import Settings
    from satellite.ports import CatalogStore, DiscoveryQueue, EventPublisher

__all__ = ["DiscoveryService", "RequestResult", "requested_at", "select_due"]

logger = logging.getLogger(__name__)

_RECOVERABLE = frozenset({Status.OFFLINE, Status.ERROR})
_FAILED = frozenset({DiscoveryState.FAILED, DiscoveryState.TIMEOUT})


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What became of all requests sharing one coalescing key; ``retry`` asks for their redelivery."""

    kind: OutcomeKind
    detail: str

    @property
    def retry(self) -> bool:
        return self.kind is OutcomeKind.RETRY


def requested_at(request: DiscoveryRequest) -> datetime:
    """When ``request`` was made, as an aware datetime (naive means UTC).

    Raises:
        InvalidInstallation: ``requested_at`` is not an ISO-8601 timestamp.
    """
    try:
        moment = datetime.fromisoformat(request.requested_at)
    except ValueError as exc:
        raise InvalidInstallation("requested_at", f"{request.requested_at!r} is not an ISO-8601 timestamp") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def select_due(
    catalog: TeamCatalog, now: datetime, ttl: timedelta
) -> list[tuple[InstallationCatalog, DiscoveryReason]]:
    """The installations of one team the schedule rediscovers, each with its reason. Pure.

    Enabled remote installations only (stdio ones are rediscovered by the stdio workers). One whose
    discovery is in progress is left alone unless it has been discovering for longer than ``ttl`` (a lost
    request).
    """
    due: list[tuple[InstallationCatalog, DiscoveryReason]] = []
    for entry in catalog.installations:
        installation, status = entry.installation, entry.status
        if not installation.enabled or not installation.transport.is_remote:
            continue
        in_progress = status.discovery is DiscoveryState.DISCOVERING or status.status is Status.DISCOVERING
        if in_progress and status.changed_at > now - ttl:
            continue
        if status.status in _RECOVERABLE or status.discovery in _FAILED or entry.discovered_at is None:
            due.append((entry, DiscoveryReason.RECOVERY))
        elif entry.discovered_at <= now - ttl or entry.discovered_config_hash != installation.config_hash:
            due.append((entry, DiscoveryReason.STALE))
    return due


class DiscoveryService:
    """Runs queued discovery requests and the rediscovery schedule against one store.

    Args:
        store: the catalog store.
        settings: concurrency, timeouts, limits, TTL and the environment for ``${VAR}`` headers.
        queue: where the schedule leaves its requests; ``None`` makes the schedule discover directly.
        events: receives ``mcp.tools.discovered`` after each successful discovery.
        now: the clock.
    """

    def __init__(
        self,
        store: CatalogStore,
        settings: Settings,
        *,
        queue: DiscoveryQueue | None = None,
        events: EventPublisher | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._settings = settings
        self._queue = queue
        self._events = events
        self._now = now

    async def handle_requests(self, requests: Sequence[DiscoveryRequest]) -> dict[str, RequestResult]:
        """Coalesce, check and run ``requests``; one result per coalescing key.

        Raises:
            InvalidInstallation: a request's ``requested_at`` is not a timestamp (check with :func:`requested_at`
                before, to fail only that request).
            StoreError: the catalog of a team could not be loaded.
        """
        latest: dict[str, DiscoveryRequest] = {}
        for request in requests:
            kept = latest.get(request.coalescing_key)
            if kept is None or requested_at(request) > requested_at(kept):
                latest[request.coalescing_key] = request
        results: dict[str, RequestResult] = {}
        jobs: dict[str, DiscoveryJob] = {}
        catalogs: dict[str, TeamCatalog] = {}
        for key, request in latest.items():
            if request.team_id not in catalogs:
                catalogs[request.team_id] = self._store.load_catalog(request.team_id)
            entry = _entry(catalogs[request.team_id], request.installation_id)
            skip = _skip_reason(entry, request)
            if skip is not None or entry is None:
                results[key] = RequestResult(OutcomeKind.SKIPPED, skip or "removed")
                logger.info(
                    "discovery request skipped",
                    extra={"operation": "handle_requests", "key": key, "reason": results[key].detail},
                )
                continue
            jobs[key] = DiscoveryJob(entry, not_discovered_since=requested_at(request))
        if len(requests) > len(latest):
            logger.info(
                "discovery requests coalesced",
                extra={"operation": "handle_requests", "requests": len(requests), "keys": len(latest)},
            )
        outcomes = await run_discoveries(
            self._store, list(jobs.values()), self._settings, self._now, events=self._events
        )
        for key, outcome in zip(jobs, outcomes, strict=True):
            results[key] = RequestResult(outcome.kind, outcome.detail)
        return results

    async def rediscover_due(self) -> list[DiscoveryRequest]:
        """Select every team's due installations and enqueue (or, without a queue, run) their rediscovery.

        Returns the selected requests, in team order.

        Raises:
            StoreError: the store or the queue failed (requests sent before the failure stay queued).
        """
        now = self._now()
        ttl = timedelta(seconds=self._settings.rediscovery_ttl_seconds)
        requests = [
            DiscoveryRequest(
                team_id=entry.installation.team_id,
                installation_id=entry.installation.installation_id,
                config_hash=entry.installation.config_hash,
                reason=reason,
                requested_at=now.isoformat(),
            )
            for team_id in self._store.team_ids()
            for entry, reason in select_due(self._store.load_catalog(team_id), now, ttl)
        ]
        logger.info(
            "rediscovery selected",
            extra={
                "operation": "rediscover_due",
                "due": len(requests),
                "recovery": _count(requests, DiscoveryReason.RECOVERY),
                "stale": _count(requests, DiscoveryReason.STALE),
                "enqueued": self._queue is not None,
            },
        )
        if self._queue is None:
            await self.handle_requests(requests)
        else:
            for request in requests:
                self._queue.send(request)
        return requests


def _entry(catalog: TeamCatalog, installation_id: str) -> InstallationCatalog | None:
    return next((e for e in catalog.installations if e.installation.installation_id == installation_id), None)


def _skip_reason(entry: InstallationCatalog | None, request: DiscoveryRequest) -> str | None:
    if entry is None:
        return f"installation {request.installation_id!r} was removed"
    installation = entry.installation
    if installation.config_hash != request.config_hash:
        return f"installation {installation.slug!r} changed since the request (hash {installation.config_hash})"
    if not installation.enabled:
        return f"installation {installation.slug!r} is disabled"
    if (
        entry.status.discovery is DiscoveryState.SUCCESS
        and entry.discovered_config_hash == request.config_hash
        and entry.discovered_at is not None
        and entry.discovered_at >= requested_at(request)
    ):
        return f"installation {installation.slug!r} was already discovered at {entry.discovered_at.isoformat()}"
    return None


def _count(requests: Iterable[DiscoveryRequest], reason: DiscoveryReason) -> int:
    return sum(1 for request in requests if request.reason is reason)
