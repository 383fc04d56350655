"""Discovery as the system runs it: claim, discover upstream, record the outcome in the store, publish.

Each installation goes through three steps:

1. **Claim.** A conditional write marks its discovery ``discovering`` and claims it for its configuration
   hash (see ``DynamoCatalogStore.claim_discovery``). Only one discovery of one hash runs at a time; a second
   one is skipped. A serving installation keeps serving while it is rediscovered; a new one becomes
   ``discovering``.
2. **Discover** all claimed installations with bounded concurrency (:func:`satellite.upstream.discover_many`).
3. **Record.** A success atomically replaces the cached entries (``online``, discovery ``success``) and is
   published as ``mcp.tools.discovered``. A failure is classified (:mod:`satellite.classify`) and recorded as
   a status change only: the last good tools stay (failures never erase knowledge), the router refuses calls
   to a non-serving installation, and the schedule retries it. Every outcome write is conditional on the
   configuration hash, so a result for an older configuration is never stored.

Differential rediscovery: an unchanged server's entries are replaced by identical ones (one atomic write and
one catalog version bump per rediscovery, the price of restarting its TTL); changed tools are replaced and
tools the server no longer lists disappear. The difference is logged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from satellite.catalog import InstallationCatalog, InstallationStatus, Status
from satellite.classify import classify
from satellite.errors import ConflictError, NotFound, StoreError
from satellite.ports import CatalogStore
from satellite.upstream import discover_many

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from satellite.catalog import DiscoveredCatalog
    from satellite.config import Settings
    from satellite.installation import Installation
    from satellite.ports import EventPublisher
    from satellite.upstream import DiscoveryReport

__all__ = [
    "DiscoveryJob",
    "DiscoveryOutcome",
    "CatalogStore",
    "OutcomeKind",
    "discover_and_store",
    "run_discoveries",
]

logger = logging.getLogger(__name__)

# A claim outlives the discoveries queued before it by this much, so a slow store write never lets a second
# discovery of the same hash start; a crashed discovery frees the installation after the lease.
CLAIM_MARGIN = timedelta(seconds=60)


class OutcomeKind(StrEnum):
    """What became of one discovery job."""

    STORED = "stored"  # discovered and stored
    FAILED = "failed"  # the upstream failed; the classified failure was recorded
    SKIPPED = "skipped"  # not run or not stored: claimed elsewhere, superseded, removed, or not discoverable here
    RETRY = "retry"  # the store failed; the request should be delivered again


@dataclass(frozen=True, slots=True)
class DiscoveryJob:
    """One installation to discover, as the catalog holds it now.

    ``not_discovered_since``: skip the job when this configuration was already discovered at or after it
    (the moment the discovery was requested).
    """

    entry: InstallationCatalog
    not_discovered_since: datetime | None = None

    @property
    def installation(self) -> Installation:
        return self.entry.installation


@dataclass(frozen=True, slots=True)
class DiscoveryOutcome:
    """The outcome of one job; ``report`` is set when the upstream was contacted."""

    installation: Installation
    kind: OutcomeKind
    detail: str
    report: DiscoveryReport | None = None


async def run_discoveries(
    store: CatalogStore,
    jobs: Sequence[DiscoveryJob],
    settings: Settings,
    now: Callable[[], datetime],
    *,
    events: EventPublisher | None = None,
) -> list[DiscoveryOutcome]:
    """Claim, discover (at most ``settings.discovery_concurrency`` at once) and record each job; one outcome each.

    Never raises for upstream or store trouble: each job's outcome says what happened, and ``retry`` marks
    the ones a store failure interrupted.
    """
    outcomes: dict[str, DiscoveryOutcome] = {}
    claimed: list[DiscoveryJob] = []
    lease = _lease(jobs, settings)
    for job in jobs:
        installation = job.installation
        if not installation.transport.is_remote:
            outcomes[installation.installation_id] = DiscoveryOutcome(
                installation, OutcomeKind.SKIPPED, "stdio installations are discovered by the stdio workers"
            )
            continue
        refusal = _claim(store, job, now(), lease)
        if refusal is None:
            claimed.append(job)
        else:
            outcomes[installation.installation_id] = refusal
    reports = await discover_many(
        [job.installation for job in claimed],
        settings.environment,
        limits=settings.limits,
        timeout=settings.discovery_timeout_seconds,
        connect_timeout=settings.connect_timeout_seconds,
        concurrency=settings.discovery_concurrency,
        now=now,
    )
    for job, report in zip(claimed, reports, strict=True):
        outcomes[job.installation.installation_id] = _record(store, job.entry, report, now, events)
    return [outcomes[job.installation.installation_id] for job in jobs]


async def discover_and_store(
    store: CatalogStore,
    installations: Sequence[Installation],
    settings: Settings,
    now: Callable[[], datetime],
    *,
    events: EventPublisher | None = None,
) -> list[DiscoveryReport]:
    """Discover newly added ``installations`` and store each outcome; returns the reports of those that ran."""
    started = now()
    jobs = [DiscoveryJob(InstallationCatalog(i, InstallationStatus(Status.NEVER, started))) for i in installations]
    outcomes = await run_discoveries(store, jobs, settings, now, events=events)
    return [outcome.report for outcome in outcomes if outcome.report is not None]


def _lease(jobs: Sequence[DiscoveryJob], settings: Settings) -> timedelta:
    # Claims are taken before the bounded run, so the last one may wait for every earlier round to finish.
    slowest = max(
        (job.installation.timeout_seconds or settings.discovery_timeout_seconds for job in jobs),
        default=settings.discovery_timeout_seconds,
    )
    rounds = math.ceil(len(jobs) / max(1, settings.discovery_concurrency)) or 1
    return timedelta(seconds=slowest * rounds) + CLAIM_MARGIN


def _claim(store: CatalogStore, job: DiscoveryJob, claimed_at: datetime, lease: timedelta) -> DiscoveryOutcome | None:
    installation = job.installation
    current = job.entry.status.status
    # A serving installation keeps serving its last good tools while it is rediscovered; so does an
    # offline one keep its error until the outcome replaces it.
    status = Status.DISCOVERING if current is Status.NEVER else current
    try:
        store.claim_discovery(
            installation.team_id,
            installation.installation_id,
            installation.config_hash,
            status=status,
            claimed_at=claimed_at,
            lease_until=claimed_at + lease,
            not_discovered_since=job.not_discovered_since,
        )
    except (ConflictError, NotFound) as exc:
        logger.info("discovery skipped", extra={**installation.log_fields("claim_discovery"), "reason": str(exc)})
        return DiscoveryOutcome(installation, OutcomeKind.SKIPPED, str(exc))
    except StoreError as exc:
        logger.warning("discovery not claimed", extra={**installation.log_fields("claim_discovery"), "error": str(exc)})
        return DiscoveryOutcome(installation, OutcomeKind.RETRY, str(exc))
    return None


def _record(
    store: CatalogStore,
    entry: InstallationCatalog,
    report: DiscoveryReport,
    now: Callable[[], datetime],
    events: EventPublisher | None,
) -> DiscoveryOutcome:
    installation = entry.installation
    try:
        if report.catalog is not None:
            store.replace_catalog(installation.team_id, installation.installation_id, report.catalog)
            logger.info(
                "discovered", extra={**installation.log_fields("discover"), **_difference(entry, report.catalog)}
            )
            _publish(events, installation, report.catalog)
            return DiscoveryOutcome(installation, OutcomeKind.STORED, "discovered and stored", report)
        message = report.failure_message or "discovery failed without a message"
        classification = classify(str(report.failure_kind or "protocol"), message)
        store.set_status(
            installation.team_id,
            installation.installation_id,
            classification.to_status(now(), message),
            config_hash=installation.config_hash,
        )
        logger.warning(
            "discovery failed",
            extra={
                **installation.log_fields("discover"),
                "failure_kind": classification.kind.value,
                "error_class": classification.error_class.value,
                "error": message,
            },
        )
        return DiscoveryOutcome(installation, OutcomeKind.FAILED, message, report)
    except (ConflictError, NotFound) as exc:
        # A newer configuration, a newer discovery or a removal won: this outcome no longer matters.
        logger.info("discovery outcome superseded", extra={**installation.log_fields("discover"), "reason": str(exc)})
        return DiscoveryOutcome(installation, OutcomeKind.SKIPPED, str(exc), report)
    except StoreError as exc:
        logger.warning("discovery outcome not stored", extra={**installation.log_fields("discover"), "error": str(exc)})
        return DiscoveryOutcome(installation, OutcomeKind.RETRY, str(exc), report)


def _publish(events: EventPublisher | None, installation: Installation, discovered: DiscoveredCatalog) -> None:
    if events is None:
        return
    try:
        events.publish_tools_discovered(installation, discovered)
    except StoreError as exc:
        # The catalog is stored; metadata is eventually consistent and the next rediscovery publishes again.
        logger.warning(
            "tools discovered event not published", extra={**installation.log_fields("publish"), "error": str(exc)}
        )


def _difference(entry: InstallationCatalog, discovered: DiscoveredCatalog) -> dict[str, int]:
    before = {tool.name: tool.definition for tool in entry.tools}
    after = {tool.name: tool.definition for tool in discovered.tools}
    return {
        "tools": len(after),
        "added": len(after.keys() - before.keys()),
        "removed": len(before.keys() - after.keys()),
        "changed": sum(1 for name in after.keys() & before.keys() if after[name] != before[name]),
    }
