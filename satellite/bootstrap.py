"""Wiring: builds the adapters and the app once per process, for the Lambda entry and the local stack alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.discovery_queue import SqsDiscoveryQueue
from satellite.aws.metadata_store import DynamoMetadataStore
from satellite.aws.stdio_bridge import SqsStdioBridge
from satellite.http_app import create_app
from satellite.installation import Transport
from satellite.installations import InstallationService
from satellite.router import Router
from satellite.upstream import RemoteUpstream

if TYPE_CHECKING:
    from fastapi import FastAPI

    from satellite.config import Settings
    from satellite.ports import Upstream

__all__ = ["Gateway", "build_gateway"]


class Gateway:
    """The gateway's long-lived parts: the app and what must be closed when the process stops."""

    def __init__(
        self, app: FastAPI, router: Router, remote: RemoteUpstream, stdio: SqsStdioBridge | None = None
    ) -> None:
        self.app = app
        self.router = router
        self.remote = remote
        self.stdio = stdio

    async def aclose(self) -> None:
        await self.remote.aclose()


def build_gateway(settings: Settings, *, dynamodb_client: Any = None, sqs_client: Any = None) -> Gateway:
    """Build the store, the queues, the upstreams, the router and the app from ``settings``.

    stdio installations are served through the worker queue when ``settings.worker_queue_url`` is set;
    without it the router answers that this gateway cannot reach them.
    """
    store = DynamoCatalogStore(settings.catalog_table, client=dynamodb_client)
    stdio = SqsStdioBridge.from_settings(settings, client=sqs_client) if settings.worker_queue_url else None
    installations = InstallationService(
        store,
        SqsDiscoveryQueue(settings.discovery_queue_url, client=sqs_client),
        DynamoMetadataStore(settings.metadata_table, client=dynamodb_client),
        workers=stdio,
    )
    remote = RemoteUpstream(
        environment=settings.environment,
        call_timeout=settings.call_timeout_seconds,
        connect_timeout=settings.connect_timeout_seconds,
    )
    upstreams: dict[Transport, Upstream] = {Transport.STREAMABLE_HTTP: remote, Transport.SSE: remote}
    if stdio is not None:
        upstreams[Transport.STDIO] = stdio
    router = Router(store, upstreams, check_interval=settings.catalog_check_interval_seconds)
    return Gateway(create_app(router, installations, settings), router, remote, stdio)
