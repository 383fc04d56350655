"""Ports: the small interfaces the core is written against. Adapters live in ``satellite.aws`` and
``satellite.upstream``; tests may use in-memory twins for pure logic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from datetime import datetime

    from satellite.catalog import DiscoveredCatalog, InstallationStatus, Status, TeamCatalog
    from satellite.discovery_jobs import DiscoveryRequest
    from satellite.installation import Installation
    from satellite.stdio.messages import Request

__all__ = [
    "CatalogStore",
    "DiscoveryQueue",
    "EventPublisher",
    "MetadataStore",
    "RequestClaims",
    "Upstream",
    "WorkerControl",
]


class CatalogStore(Protocol):
    """Where installations, their status and their discovered catalog live, scoped by team."""

    def catalog_version(self, team_id: str) -> int:
        """The team's catalog version: it moves whenever anything the gateway serves changes (0 if none)."""
        ...

    def load_catalog(self, team_id: str) -> TeamCatalog:
        """The team's whole catalog in one consistent snapshot (never a half-replaced installation)."""
        ...

    def add_installation(self, installation: Installation) -> None:
        """Add a new installation with status ``never``.

        Raises:
            DuplicateSlug: the team already has an installation with this slug for the same owner.
            ConflictError: the installation id already exists.
        """
        ...

    def update_installation(self, installation: Installation) -> None:
        """Replace an installation's configuration, keeping its status and cached entries.

        Raises:
            NotFound: no such installation.
            DuplicateSlug: the new slug is taken.
        """
        ...

    def remove_installation(self, team_id: str, installation_id: str) -> None:
        """Remove an installation with its status and every cached tool, resource and template."""
        ...

    def replace_catalog(self, team_id: str, installation_id: str, discovered: DiscoveredCatalog) -> None:
        """Atomically replace an installation's tools, resources and templates and mark it online.

        Readers see either the old entries or the new ones, never a mix. An older ``discovered_at``
        never overwrites a newer one.

        Raises:
            NotFound: the installation was removed meanwhile.
            ConflictError: a newer discovery was already stored.
        """
        ...

    def set_status(
        self,
        team_id: str,
        installation_id: str,
        status: InstallationStatus,
        expected: Collection[Status] | None = None,
        *,
        config_hash: str | None = None,
    ) -> None:
        """Conditionally set an installation's status.

        The write succeeds only if the stored status is one of ``expected`` (any, when ``None``), the
        stored ``changed_at`` is not newer than ``status.changed_at`` and, with ``config_hash``, the
        installation still has that configuration hash.

        Raises:
            NotFound: no such installation.
            ConflictError: the condition failed.
        """
        ...

    def claim_discovery(
        self,
        team_id: str,
        installation_id: str,
        config_hash: str,
        *,
        status: Status,
        claimed_at: datetime,
        lease_until: datetime,
        not_discovered_since: datetime | None = None,
    ) -> None:
        """Claim the discovery of one configuration hash and mark it ``discovering``.

        One live claim per hash: a second claim before ``lease_until`` fails, so concurrent
        discoveries of one installation run once; the lease frees it if a claimant crashed.

        Raises:
            NotFound: no such installation.
            ConflictError: claimed elsewhere, superseded by another hash, or already discovered since.
        """
        ...

    def team_ids(self) -> list[str]:
        """Every team that has a catalog (for the rediscovery schedule)."""
        ...


class Upstream(Protocol):
    """Runs calls against an installation's upstream server; results are raw MCP result objects."""

    async def call_tool(self, installation: Installation, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``tools/call`` and return the upstream result unchanged (content, structuredContent, isError).

        Raises:
            UpstreamError: the upstream could not be reached or answered with a protocol error.
        """
        ...

    async def read_resource(self, installation: Installation, uri: str) -> dict[str, Any]:
        """Run ``resources/read`` and return the upstream result unchanged (text and blob contents).

        Raises:
            UpstreamError: the upstream could not be reached or answered with a protocol error.
        """
        ...


class DiscoveryQueue(Protocol):
    """Where discovery requests wait for the discovery consumer; sending never waits on an upstream."""

    def send(self, request: DiscoveryRequest) -> None:
        """Queue one discovery request.

        Raises:
            StoreError: the queue refused the message.
        """
        ...


class EventPublisher(Protocol):
    """Publishes ``mcp.tools.discovered`` after each successful discovery (remote and stdio alike)."""

    def publish_tools_discovered(self, installation: Installation, discovered: DiscoveredCatalog) -> None:
        """Publish the tool metadata of one discovery, with per-tool token counts.

        Raises:
            StoreError: the event bus refused the event.
        """
        ...


class MetadataStore(Protocol):
    """Per-tool metadata (token counts) as the metadata batcher stored it."""

    def remove_installation(self, team_id: str, installation_id: str) -> None:
        """Remove an installation's metadata; later events for it are refused."""
        ...

    def token_savings(self, team_id: str) -> dict[str, Any]:
        """Tokens with every tool exposed directly, with the four meta-tools, and the reduction."""
        ...


class RequestClaims(Protocol):
    """At-most-once bookkeeping of request ids (``DynamoClaimsStore``)."""

    def claim(self, request_id: str, ttl_seconds: int) -> bool:
        """Claim ``request_id``; ``True`` if this call claimed it."""
        ...

    def record_outcome(self, request_id: str, reply_json: str) -> None:
        """Record the reply of a claimed request."""
        ...

    def outcome(self, request_id: str) -> str | None:
        """The recorded reply of ``request_id``, if any."""
        ...


class WorkerControl(Protocol):
    """Where fire-and-forget requests to the stdio workers go (``SqsStdioBridge``)."""

    def send_control(self, request: Request) -> None:
        """Send a ``discover`` or ``stop`` request; nobody waits for a reply.

        Raises:
            StoreError: the queue refused the message.
        """
        ...
