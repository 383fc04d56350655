"""Adding, changing and removing installations: the core behind ``/api/installations``.

Nothing here waits on an upstream: a new or changed installation is marked ``discovering`` and a
discovery request is queued; the discovery consumer does the rest in the background.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from satellite.catalog import DiscoveryState, InstallationStatus, Status
from satellite.discovery_jobs import DiscoveryReason, DiscoveryRequest
from satellite.errors import NotFound

if TYPE_CHECKING:
    from collections.abc import Callable

    from satellite.catalog import InstallationCatalog, TeamCatalog
    from satellite.config import Identity
    from satellite.installation import Installation
    from satellite.ports import CatalogStore, DiscoveryQueue, MetadataStore

__all__ = ["InstallationService"]


class InstallationService:
    """Installation lifecycle over the catalog store and the discovery queue, scoped to one caller's team."""

    def __init__(
        self,
        store: CatalogStore,
        queue: DiscoveryQueue,
        metadata: MetadataStore,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._queue = queue
        self._metadata = metadata
        self._now = now

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
        return replace(current, installation=installation)

    def remove(self, identity: Identity, installation_id: str) -> None:
        """Remove an installation with its tools, resources, templates and metadata.

        Raises:
            NotFound: no such installation in the caller's team.
        """
        self.get(identity, installation_id)
        self._store.remove_installation(identity.team_id, installation_id)
        self._metadata.remove_installation(identity.team_id, installation_id)

    def token_savings(self, identity: Identity) -> dict[str, Any]:
        """The team's tokens with every tool exposed directly, with the four meta-tools, and the reduction."""
        return self._metadata.token_savings(identity.team_id)

    def _queue_discovery(self, installation: Installation, reason: DiscoveryReason) -> InstallationCatalog:
        now = self._now()
        status = InstallationStatus(Status.DISCOVERING, now, discovery=DiscoveryState.DISCOVERING)
        self._store.set_status(installation.team_id, installation.installation_id, status)
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

    def _find(self, team_id: str, installation_id: str) -> InstallationCatalog:
        for entry in self._store.load_catalog(team_id).installations:
            if entry.installation.installation_id == installation_id:
                return entry
        raise NotFound(f"no installation {installation_id!r} in this team")
