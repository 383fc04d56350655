"""Adding, changing and removing installations: the core behind ``/api/installations``.

Nothing here waits on an upstream: a new or changed installation is marked ``discovering`` and a
discovery request is queued; the discovery consumer does the rest in the background. stdio installations
are discovered by the stdio workers instead: with worker control configured, adding or changing one sends
the workers a ``discover`` request (a worker spawns the server and records its tools within seconds),
disabling one sends ``stop`` and removing one sends ``stop`` with ``{"uninstall": true}``.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from satellite.catalog import DiscoveryState, InstallationStatus, Status
from satellite.discovery_jobs import DiscoveryReason, DiscoveryRequest
from satellite.errors import NotFound
from satellite.installation import Transport
from satellite.stdio.messages import Request, RequestKind

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from satellite.catalog import InstallationCatalog, TeamCatalog
    from satellite.config import Identity
    from satellite.installation import Installation
    from satellite.ports import CatalogStore, DiscoveryQueue, MetadataStore, WorkerControl

__all__ = ["CONTROL_DEADLINE_SECONDS", "InstallationService", "control_request"]

# A discover or stop request waits this long for a worker; past it the worker skips it (a call spawns the
# server anyway, and an idle one stops by itself).
CONTROL_DEADLINE_SECONDS = 3600.0


def control_request(
    installation: Installation, kind: RequestKind, now: datetime, params: Mapping[str, Any] | None = None
) -> Request:
    """A fire-and-forget ``discover`` or ``stop`` request for ``installation`` (no reply queue). Pure."""
    return Request(
        request_id=uuid.uuid4().hex,
        kind=kind,
        team_id=installation.team_id,
        installation_id=installation.installation_id,
        config_hash=installation.config_hash,
        deadline=now + timedelta(seconds=CONTROL_DEADLINE_SECONDS),
        params=dict(params or {}),
    )


class InstallationService:
    """Installation lifecycle over the catalog store and the discovery queue, scoped to one caller's team.

    Args:
        store: the catalog store.
        queue: where discovery requests of remote installations go.
        metadata: per-tool metadata, removed with the installation.
        workers: where ``discover``/``stop`` requests of stdio installations go; without it stdio
            installations are queued for discovery like remote ones (and skipped there).
        now: the clock.
    """

    def __init__(
        self,
        store: CatalogStore,
        queue: DiscoveryQueue,
        metadata: MetadataStore,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        workers: WorkerControl | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._metadata = metadata
        self._now = now
        self._workers = workers

    def new_id(self) -> str:
        return uuid.uuid4().hex

    def catalog(self, identity: Identity) -> TeamCatalog:
        """The caller's catalog from the cache, with no upstream call."""
        return self._store.load_catalog(identity.team_id).visible_to(identity.user_id)

    def get(self, identity: Identity, installation_id: str) -> InstallationCatalog:
        """One installation of the caller's team.

        Raises:
            NotFound: the team has no such installation.
        """
        return self._find(identity.team_id, installation_id)

    def add(self, installation: Installation) -> InstallationCatalog:
        """Store a new installation, mark it ``discovering`` and queue its discovery; returns at once.

        Raises:
            DuplicateSlug: the slug is taken for the same owner.
            StoreError: the discovery request could not be queued.
        """
        self._store.add_installation(installation)
        return self._queue_discovery(installation, DiscoveryReason.ADDED)

    def update(self, identity: Identity, installation: Installation) -> InstallationCatalog:
        """Replace an installation's configuration; rediscover only when its configuration hash changed.

        Raises:
            NotFound: no such installation in the caller's team.
            DuplicateSlug: the new slug is taken.
        """
        current = self.get(identity, installation.installation_id)
        self._store.update_installation(installation)
        if installation.config_hash != current.installation.config_hash:
            return self._queue_discovery(installation, DiscoveryReason.CHANGED)
        if self._stdio(installation) and current.installation.enabled and not installation.enabled:
            self._send_worker(installation, RequestKind.STOP)
        return replace(current, installation=installation)

    def remove(self, identity: Identity, installation_id: str) -> None:
        """Remove an installation with its tools, resources, templates and metadata.

        Raises:
            NotFound: no such installation in the caller's team.
        """
        entry = self.get(identity, installation_id)
        self._store.remove_installation(identity.team_id, installation_id)
        self._metadata.remove_installation(identity.team_id, installation_id)
        if self._stdio(entry.installation):
            self._send_worker(entry.installation, RequestKind.STOP, {"uninstall": True})

    def token_savings(self, identity: Identity) -> dict[str, Any]:
        """The team's tokens with every tool exposed directly, with the four meta-tools, and the reduction."""
        return self._metadata.token_savings(identity.team_id)

    def _queue_discovery(self, installation: Installation, reason: DiscoveryReason) -> InstallationCatalog:
        now = self._now()
        status = InstallationStatus(Status.DISCOVERING, now, discovery=DiscoveryState.DISCOVERING)
        self._store.set_status(installation.team_id, installation.installation_id, status)
        if self._stdio(installation):
            self._send_worker(installation, RequestKind.DISCOVER)
        else:
            self._queue.send(
                DiscoveryRequest(
                    team_id=installation.team_id,
                    installation_id=installation.installation_id,
                    config_hash=installation.config_hash,
                    reason=reason,
                    requested_at=now.isoformat(),
                )
            )
        return self._find(installation.team_id, installation.installation_id)

    def _stdio(self, installation: Installation) -> bool:
        return self._workers is not None and installation.transport is Transport.STDIO

    def _send_worker(
        self, installation: Installation, kind: RequestKind, params: Mapping[str, Any] | None = None
    ) -> None:
        assert self._workers is not None
        self._workers.send_control(control_request(installation, kind, self._now(), params))

    def _find(self, team_id: str, installation_id: str) -> InstallationCatalog:
        for entry in self._store.load_catalog(team_id).installations:
            if entry.installation.installation_id == installation_id:
                return entry
        raise NotFound(f"no installation {installation_id!r} in this team")
