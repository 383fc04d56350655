"""Entry point of the stdio worker (``python -m workers.worker``): settings from the environment, wiring, run.

SIGTERM (a Fargate stop) and SIGINT make the worker take no new work, finish in-flight calls within
``SATELLITE_WORKER_STOP_GRACE_SECONDS`` and stop every child process group before it exits.
"""

from __future__ import annotations

import logging
import signal
import sys

import anyio
import boto3

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.claims_store import DynamoClaimsStore
from satellite.aws.events import EventBridgePublisher
from satellite.config import Settings
from satellite.errors import SatelliteError
from satellite.stdio.worker import Worker

logger = logging.getLogger("workers.worker")


def build_worker(settings: Settings) -> Worker:
    """The worker with its AWS adapters, clients created once for the process (they honour ``AWS_ENDPOINT_URL``)."""
    dynamodb = boto3.client("dynamodb")
    events = EventBridgePublisher(settings.event_bus_name) if settings.event_bus_name else None
    return Worker(
        settings,
        boto3.client("sqs"),
        DynamoClaimsStore(settings.claims_table, dynamodb),
        DynamoCatalogStore(settings.catalog_table, dynamodb),
        events=events,
    )


async def serve(worker: Worker) -> None:
    """Run ``worker`` until SIGTERM or SIGINT, then let it stop gracefully."""
    async with anyio.create_task_group() as group:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for received in signals:
                    logger.info("stopping", extra={"operation": "worker", "signal": int(received)})
                    worker.stop()
                    return

        group.start_soon(stop_on_signal)
        await worker.run()
        group.cancel_scope.cancel()


def main() -> int:
    """Run one worker process; the exit code is 0 after a clean stop."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_environment()
        anyio.run(serve, build_worker(settings))
    except SatelliteError:
        logger.exception("worker failed", extra={"operation": "worker"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
