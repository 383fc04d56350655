"""Lambda entry point of discovery: SQS discovery requests and the EventBridge rediscovery schedule."""

from __future__ import annotations

from typing import Any

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.discovery_queue import SqsDiscoveryQueue
from satellite.aws.events import EventBridgePublisher
from satellite.aws.stdio_bridge import ReplyQueueSweeper
from satellite.config import Settings
from satellite.discovery_consumer import DiscoveryConsumer
from satellite.discovery_service import DiscoveryService

settings = Settings.from_environment()
consumer = DiscoveryConsumer(
    DiscoveryService(
        DynamoCatalogStore(settings.catalog_table),
        settings,
        queue=SqsDiscoveryQueue(settings.discovery_queue_url) if settings.discovery_queue_url else None,
        events=EventBridgePublisher(settings.event_bus_name) if settings.event_bus_name else None,
    ),
    sweep_reply_queues=ReplyQueueSweeper(settings.reply_queue_prefix, settings.reply_queue_stale_seconds),
)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return consumer.handle(event, context)
