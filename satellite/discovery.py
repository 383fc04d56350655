"""Discovery as the gateway runs it: discover installations upstream and record the outcome in the store.

A success atomically replaces the installation's cached entries and marks it online. A failure
records the status and error but keeps the last good tools (failures never erase knowledge):
unreachable or timed-out servers become ``offline``, authentication and protocol failures ``error``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from satellite.catalog import InstallationStatus, Status
from satellite.errors import FailureKind
from satellite.upstream import discover_many

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from satellite.config import Settings
    from satellite.installation import Installation
    from satellite.ports import CatalogStore
    from satellite.upstream import DiscoveryReport

__all__ = ["discover_and_store"]

logger = logging.getLogger(__name__)

_FAILURE_STATUS = {
    FailureKind.UNREACHABLE: Status.OFFLINE,
    FailureKind.TIMEOUT: Status.OFFLINE,
    FailureKind.AUTH: Status.ERROR,
    FailureKind.PROTOCOL: Status.ERROR,
}


async def discover_and_store(
    store: CatalogStore,
    installations: Sequence[Installation],
    settings: Settings,
    now: Callable[[], datetime],
) -> list[DiscoveryReport]:
    """Discover ``installations`` in parallel (bounded) and store each outcome; returns the reports."""
    for installation in installations:
        store.set_status(
            installation.team_id, installation.installation_id, InstallationStatus(Status.DISCOVERING, now())
        )
    reports = await discover_many(
        installations,
        settings.environment,
        limits=settings.limits,
        timeout=settings.discovery_timeout_seconds,
        connect_timeout=settings.connect_timeout_seconds,
        concurrency=settings.discovery_concurrency,
        now=now,
    )
    for report in reports:
        installation = report.installation
        if report.catalog is not None:
            store.replace_catalog(installation.team_id, installation.installation_id, report.catalog)
            logger.info("discovered", extra={"operation": "discover", "slug": installation.slug})
            continue
        kind = report.failure_kind or FailureKind.PROTOCOL
        message = report.failure_message or "discovery failed without a message"
        status = InstallationStatus(_FAILURE_STATUS[kind], now(), last_error=message, failure_kind=kind)
        store.set_status(installation.team_id, installation.installation_id, status)
        logger.warning("discovery failed", extra={"operation": "discover", "slug": installation.slug, "error": message})
    return reports
