"""The discovery queue on SQS: where the installations API and the schedule leave discovery requests."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from satellite.errors import StoreError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from satellite.discovery_jobs import DiscoveryRequest

__all__ = ["SqsDiscoveryQueue"]

logger = logging.getLogger(__name__)


class SqsDiscoveryQueue:
    """:class:`satellite.ports.DiscoveryQueue` on one SQS queue (``DiscoveryQueue`` in template.yaml).

    Args:
        queue_url: the queue's URL.
        client: a low-level SQS client; by default one is created here (it honours ``AWS_ENDPOINT_URL``), unless
            no queue URL is configured: then there is nothing to talk to and :meth:`send` refuses.
    """

    def __init__(self, queue_url: str, client: SQSClient | None = None) -> None:
        self._queue_url = queue_url
        self._client: SQSClient | None = client if client is not None or not queue_url else boto3.client("sqs")

    def send(self, request: DiscoveryRequest) -> None:
        """Queue one discovery request.

        Raises:
            StoreError: the queue URL is not configured or SQS refused the message.
        """
        if self._client is None or not self._queue_url:
            raise StoreError("no discovery queue is configured (set SATELLITE_DISCOVERY_QUEUE_URL)")
        try:
            response = self._client.send_message(QueueUrl=self._queue_url, MessageBody=request.to_json())
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise StoreError(f"send_message failed: {error.get('Code', '')}: {error.get('Message', '')}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"send_message failed: {exc}") from exc
        logger.info(
            "discovery requested",
            extra={
                "operation": "send_discovery_request",
                "team_id": request.team_id,
                "installation_id": request.installation_id,
                "reason": request.reason.value,
                "message_id": response.get("MessageId"),
            },
        )
