"""The discovery function's event handling: SQS batches of discovery requests, and the rediscovery schedule.

An SQS batch is parsed record by record, all valid requests run together (coalesced, bounded concurrency), and
powertools' batch processor reports per record: a malformed message, or one whose outcome could not be stored,
is a failed item, retried by SQS and dead-lettered after the queue's ``maxReceiveCount``; the other records
succeed. A discovery that reached the upstream and failed is *not* a failed item: its failure is recorded in
the installation's status, and the schedule retries it. An EventBridge ``Scheduled Event`` runs the schedule,
and with it the sweep of stale stdio reply queues (``satellite.aws.stdio_bridge.sweep_reply_queues``): both are
housekeeping at the same rate, and one schedule means one rule and one function to grant.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from satellite.discovery_jobs import DiscoveryRequest
from satellite.discovery_service import requested_at
from satellite.errors import InvalidInstallation, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from satellite.discovery_service import DiscoveryService, RequestResult

__all__ = ["SCHEDULED_EVENT", "DiscoveryConsumer"]

logger = logging.getLogger(__name__)

SCHEDULED_EVENT = "Scheduled Event"


class DiscoveryConsumer:
    """Maps Lambda events to :class:`~satellite.discovery_service.DiscoveryService` calls and back."""

    def __init__(
        self, service: DiscoveryService, *, sweep_reply_queues: Callable[[], Sequence[str]] | None = None
    ) -> None:
        self._service = service
        self._sweep_reply_queues = sweep_reply_queues

    def handle(self, event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
        """Handle one invocation: a scheduled event or an SQS batch (answered with ``batchItemFailures``).

        Raises:
            StoreError: the schedule could not read the catalog or fill the queue (the next run tries again).
        """
        if event.get("detail-type") == SCHEDULED_EVENT:
            requests = anyio.run(self._service.rediscover_due)
            response: dict[str, Any] = {"due": len(requests), "installations": [r.coalescing_key for r in requests]}
            if self._sweep_reply_queues is not None:
                response["reply_queues_swept"] = len(self._sweep_reply_queues())
            return response
        return self._handle_batch(dict(event), context)

    def _handle_batch(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        parsed: dict[str, DiscoveryRequest] = {}
        malformed: dict[str, InvalidInstallation] = {}
        for record in event.get("Records") or []:
            message_id = str(record.get("messageId", ""))
            try:
                request = DiscoveryRequest.from_json(str(record.get("body", "")))
                requested_at(request)
            except InvalidInstallation as exc:
                malformed[message_id] = exc
                logger.warning(
                    "malformed discovery request",
                    extra={"operation": "discovery_batch", "message_id": message_id, "error": str(exc)},
                )
                continue
            parsed[message_id] = request
        try:
            results = anyio.run(self._service.handle_requests, list(parsed.values()))
        except StoreError as exc:
            # The catalog could not be read: every valid record is retried.
            logger.warning("discovery batch not processed", extra={"operation": "discovery_batch", "error": str(exc)})
            results = {}
            failure: StoreError | None = exc
        else:
            failure = None

        def record_handler(record: SQSRecord) -> None:
            if record.message_id in malformed:
                raise malformed[record.message_id]
            request = parsed[record.message_id]
            result: RequestResult | None = results.get(request.coalescing_key)
            if result is None:
                raise failure or StoreError(f"no result for {request.coalescing_key}")
            if result.retry:
                raise StoreError(result.detail)

        # Report failures per record even when every record failed: SQS retries exactly the same records either
        # way, and the function itself does not fail.
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        response: dict[str, Any] = dict(
            process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
        )
        return response
