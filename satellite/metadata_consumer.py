"""The metadata batcher's SQS handling: each record is one ``mcp.tools.discovered`` event part.

A record that fails is reported in ``batchItemFailures`` so SQS retries only it; after the queue's
``maxReceiveCount`` it moves to the dead-letter queue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from satellite.errors import SatelliteError
from satellite.metadata import ingest

if TYPE_CHECKING:
    from collections.abc import Callable

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from satellite.metadata import MetadataSink

__all__ = ["build_handler"]

logger = logging.getLogger(__name__)


def build_handler(sink: MetadataSink) -> Callable[[dict[str, Any], LambdaContext], PartialItemFailureResponse]:
    """A Lambda handler that stores SQS batches of ``mcp.tools.discovered`` events into ``sink``.

    The deployed function wires it to the metadata table below; the local stack can wire its own clients.
    """
    # An all-failed batch is reported item by item like any other, rather than raised as one error.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    def record_handler(record: SQSRecord) -> None:
        try:
            ingest(sink, record.body)
        except SatelliteError:
            logger.exception(
                "metadata record failed; SQS delivers it again",
                extra={"operation": "metadata_record", "message_id": record.message_id},
            )
            raise

    def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler
