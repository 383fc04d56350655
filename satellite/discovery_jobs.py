"""Discovery requests: what the installations API and the schedule ask the discovery consumer to do. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from satellite.errors import InvalidInstallation

__all__ = ["DiscoveryReason", "DiscoveryRequest"]

SCHEMA_VERSION = 1


class DiscoveryReason(StrEnum):
    """Why a discovery was requested."""

    ADDED = "added"
    CHANGED = "changed"
    STALE = "stale"
    RECOVERY = "recovery"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class DiscoveryRequest:
    """Discover one installation as configured with ``config_hash``; requests with the same key coalesce."""

    team_id: str
    installation_id: str
    config_hash: str
    reason: DiscoveryReason
    requested_at: str

    @property
    def coalescing_key(self) -> str:
        return f"{self.team_id}/{self.installation_id}/{self.config_hash}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": SCHEMA_VERSION,
                "team_id": self.team_id,
                "installation_id": self.installation_id,
                "config_hash": self.config_hash,
                "reason": str(self.reason),
                "requested_at": self.requested_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, body: str) -> DiscoveryRequest:
        """Parse a queued request.

        Raises:
            InvalidInstallation: the body is not a version-1 discovery request.
        """
        try:
            data: Any = json.loads(body)
            if data.get("version") != SCHEMA_VERSION:
                raise InvalidInstallation("version", f"unsupported discovery request version {data.get('version')!r}")
            return cls(
                team_id=str(data["team_id"]),
                installation_id=str(data["installation_id"]),
                config_hash=str(data["config_hash"]),
                reason=DiscoveryReason(data["reason"]),
                requested_at=str(data["requested_at"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInstallation("body", f"not a discovery request: {exc}") from exc
