"""In-memory twins of the ports, for unit tests of pure logic only (adapters are tested for real)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from satellite.catalog import InstallationCatalog, InstallationStatus, Status, TeamCatalog

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from satellite.catalog import DiscoveredCatalog
    from satellite.errors import UpstreamError
    from satellite.installation import Installation


class MemoryStore:
    def __init__(self) -> None:
        self.entries: dict[str, dict[str, InstallationCatalog]] = {}
        self.versions: dict[str, int] = {}
        self.loads = 0

    def catalog_version(self, team_id: str) -> int:
        return self.versions.get(team_id, 0)

    def load_catalog(self, team_id: str) -> TeamCatalog:
        self.loads += 1
        team = self.entries.get(team_id, {})
        return TeamCatalog(team_id, self.versions.get(team_id, 0), tuple(team.values()))

    def add_installation(self, installation: Installation, status: InstallationStatus | None = None) -> None:
        from datetime import UTC, datetime

        status = status or InstallationStatus(Status.NEVER, datetime.now(UTC))
        self.entries.setdefault(installation.team_id, {})[installation.installation_id] = InstallationCatalog(
            installation, status
        )
        self._bump(installation.team_id)

    def replace_catalog(self, team_id: str, installation_id: str, discovered: DiscoveredCatalog) -> None:
        entry = self.entries[team_id][installation_id]
        self.entries[team_id][installation_id] = replace(
            entry,
            status=InstallationStatus(Status.ONLINE, discovered.discovered_at),
            tools=discovered.tools,
            resources=discovered.resources,
            templates=discovered.templates,
            discovered_at=discovered.discovered_at,
            filled_by=discovered.filled_by,
        )
        self._bump(team_id)

    def set_status(
        self,
        team_id: str,
        installation_id: str,
        status: InstallationStatus,
        expected: Collection[Status] | None = None,
    ) -> None:
        entry = self.entries[team_id][installation_id]
        self.entries[team_id][installation_id] = replace(entry, status=status)
        self._bump(team_id)

    def _bump(self, team_id: str) -> None:
        self.versions[team_id] = self.versions.get(team_id, 0) + 1


class RecordingUpstream:
    def __init__(self, fail: UpstreamError | None = None) -> None:
        self.calls: list[tuple[str, str, Mapping[str, Any]]] = []
        self.reads: list[tuple[str, str]] = []
        self.fail = fail

    async def call_tool(self, installation: Installation, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if self.fail:
            raise self.fail
        self.calls.append((installation.slug, name, arguments))
        return {"content": [{"type": "text", "text": f"{name} ran"}], "structuredContent": {"ok": True}}

    async def read_resource(self, installation: Installation, uri: str) -> dict[str, Any]:
        self.reads.append((installation.slug, uri))
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "hello"}]}
