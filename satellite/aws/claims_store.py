"""Request-id claims on DynamoDB: at-most-once execution of stdio requests.

SQS delivers at least once, and tool calls have side effects. Before it executes a request, a worker claims
the request id with a conditional put (``attribute_not_exists``); only the claimant executes. After the call
it records the reply on the claim, so a redelivered or duplicate request is answered with that same reply
and never runs the tool again.

Table (``ClaimsTable`` in ``template.yaml``): partition key ``request_id`` (S), no sort key, time to live on
``expires_at`` (N, epoch seconds). Items: ``request_id``, ``claimed_at`` (ISO 8601), ``expires_at`` and,
once recorded, ``outcome`` (the reply JSON) with ``recorded_at``. Access patterns: one conditional put per
request, one update per outcome, one consistent get per duplicate.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import boto3

from satellite.aws.parts import aws_errors
from satellite.errors import ConflictError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoClaimsStore"]


class DynamoClaimsStore:
    """Claims and recorded outcomes of worker requests in one DynamoDB table.

    Args:
        table_name: the physical table name.
        client: a low-level DynamoDB client; by default one is created here (it honours ``AWS_ENDPOINT_URL``).
    """

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self._table = table_name
        self._client: DynamoDBClient = client if client is not None else boto3.client("dynamodb")

    def claim(self, request_id: str, ttl_seconds: int) -> bool:
        """Claim ``request_id`` for ``ttl_seconds``; ``True`` if this call claimed it, ``False`` if it was claimed.

        Raises:
            StoreError: DynamoDB failed (the request must not run: its claim is unknown).
        """
        now = time.time()
        try:
            with aws_errors("claim request"):
                self._client.put_item(
                    TableName=self._table,
                    Item={
                        "request_id": {"S": request_id},
                        "claimed_at": {"S": _iso(now)},
                        "expires_at": {"N": str(int(now + ttl_seconds))},
                    },
                    ConditionExpression="attribute_not_exists(request_id)",
                )
        except ConflictError:
            return False
        return True

    def record_outcome(self, request_id: str, reply_json: str) -> None:
        """Record the reply of a claimed request, so duplicates get the same answer.

        Raises:
            StoreError: DynamoDB failed.
        """
        with aws_errors("record request outcome"):
            self._client.update_item(
                TableName=self._table,
                Key={"request_id": {"S": request_id}},
                UpdateExpression="SET #outcome = :outcome, #recorded = :recorded",
                ExpressionAttributeNames={"#outcome": "outcome", "#recorded": "recorded_at"},
                ExpressionAttributeValues={":outcome": {"S": reply_json}, ":recorded": {"S": _iso(time.time())}},
            )

    def outcome(self, request_id: str) -> str | None:
        """The recorded reply JSON of ``request_id``, or ``None`` when none is recorded (yet).

        Raises:
            StoreError: DynamoDB failed.
        """
        with aws_errors("read request outcome"):
            response = self._client.get_item(
                TableName=self._table,
                Key={"request_id": {"S": request_id}},
                ConsistentRead=True,
                ProjectionExpression="#outcome",
                ExpressionAttributeNames={"#outcome": "outcome"},
            )
        item = response.get("Item") or {}
        value = item.get("outcome", {}).get("S")
        return None if value is None else str(value)


def _iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds")
