"""The event publisher on EventBridge: ``mcp.tools.discovered`` after each successful discovery.

Events are built by :func:`satellite.metadata.build_events` (one event, or self-describing parts for large
catalogs). PutEvents takes at most 10 entries and 256 KB per request, so entries are grouped greedily under
both limits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from satellite.errors import StoreError
from satellite.metadata import DETAIL_TYPE, ENTRY_LIMIT_BYTES, SOURCE, build_events, encode_detail, entry_size

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

    from satellite.catalog import DiscoveredCatalog
    from satellite.installation import Installation

__all__ = ["EventBridgePublisher"]

logger = logging.getLogger(__name__)

_MAX_ENTRIES = 10


class EventBridgePublisher:
    """:class:`satellite.ports.EventPublisher` on one EventBridge bus.

    Args:
        bus_name: the event bus name (or ARN).
        client: a low-level EventBridge client; by default one is created here (it honours ``AWS_ENDPOINT_URL``).
    """

    def __init__(self, bus_name: str, client: EventBridgeClient | None = None) -> None:
        if not bus_name:
            raise ValueError("bus_name is required (SATELLITE_EVENT_BUS_NAME)")
        self._bus = bus_name
        self._client: EventBridgeClient = client if client is not None else boto3.client("events")

    def publish_tools_discovered(self, installation: Installation, discovered: DiscoveredCatalog) -> None:
        """Publish the tool metadata of one discovery, with per-tool token counts.

        Raises:
            StoreError: the event bus refused an entry or the call failed.
        """
        details = build_events(installation, discovered)
        for batch in _batches(details):
            self._put(batch)
        logger.info(
            "tools discovered event published",
            extra={
                "operation": "publish_tools_discovered",
                "team_id": installation.team_id,
                "installation_id": installation.installation_id,
                "tools": len(discovered.tools),
                "parts": len(details),
            },
        )

    def _put(self, details: Sequence[Mapping[str, Any]]) -> None:
        entries: list[PutEventsRequestEntryTypeDef] = [
            {
                "EventBusName": self._bus,
                "Source": SOURCE,
                "DetailType": DETAIL_TYPE,
                "Detail": encode_detail(detail),
            }
            for detail in details
        ]
        try:
            response = self._client.put_events(Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"publishing {DETAIL_TYPE} to {self._bus} failed: {exc}") from exc
        if response.get("FailedEntryCount", 0):
            errors = sorted(
                {
                    f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}"
                    for e in response.get("Entries", [])
                    if "ErrorCode" in e
                }
            )
            raise StoreError(
                f"{DETAIL_TYPE}: {response['FailedEntryCount']} of {len(entries)} entries refused by {self._bus}: "
                + "; ".join(errors)
            )


def _batches(details: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    batches: list[list[Mapping[str, Any]]] = []
    used = 0
    for detail in details:
        size = entry_size(detail)
        if not batches or used + size > ENTRY_LIMIT_BYTES or len(batches[-1]) >= _MAX_ENTRIES:
            batches.append([])
            used = 0
        batches[-1].append(detail)
        used += size
    return batches
