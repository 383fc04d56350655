"""Local stand-ins for what AWS runs around the functions: SQS event source mappings and the schedule.

An :class:`SqsPoller` long-polls a queue, hands Lambda-shaped SQS batches to a handler and deletes
what the handler did not report in ``batchItemFailures``; failed messages come back after their
visibility timeout and reach the dead-letter queue after the queue's ``maxReceiveCount``, as on AWS.
A :class:`Schedule` invokes a handler with an EventBridge scheduled event at a fixed rate.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Mapping

__all__ = ["LocalContext", "Schedule", "SqsPoller", "scheduled_event"]

logger = logging.getLogger(__name__)


class LocalContext:
    """The parts of a Lambda context object that handlers and powertools read."""

    def __init__(self, function_name: str, timeout_seconds: float) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{function_name}"
        self.memory_limit_in_mb = 1024
        self.aws_request_id = uuid.uuid4().hex
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def scheduled_event(rule_name: str) -> dict[str, Any]:
    """An EventBridge ``Scheduled Event`` as a schedule rule delivers it to a Lambda function."""
    return {
        "version": "0",
        "id": uuid.uuid4().hex,
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:000000000000:rule/{rule_name}"],
        "detail": {},
    }


class SqsPoller:
    """Long-polls one queue and invokes a handler with batches, like a Lambda SQS event source mapping."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handler: Callable[[dict[str, Any], Any], Mapping[str, Any] | None],
        *,
        function_name: str,
        timeout_seconds: float,
        batch_size: int = 10,
        batching_window_seconds: float = 0.0,
        wait_seconds: int = 1,
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._handler = handler
        self._function_name = function_name
        self._timeout = timeout_seconds
        self._batch_size = batch_size
        self._window = batching_window_seconds
        self._wait = wait_seconds
        self._arn = f"arn:aws:sqs:us-east-1:000000000000:{queue_url.rsplit('/', 1)[-1]}"

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; each receive waits at most ``wait_seconds``."""
        while not stop.is_set():
            # The top of a thread: a failure is logged and the poll goes on, as an event source mapping would.
            try:
                messages = self._receive()
                if messages:
                    self._invoke(messages)
            except Exception:
                logger.exception("poll failed", extra={"operation": self._function_name})
                stop.wait(1.0)

    def _receive(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        window_ends = time.monotonic() + self._window
        while len(messages) < self._batch_size:
            response = self._sqs.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=min(10, self._batch_size - len(messages)),
                WaitTimeSeconds=self._wait if not messages else 0,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            batch = response.get("Messages", [])
            messages.extend(batch)
            if not batch or time.monotonic() >= window_ends:
                break
        return messages

    def _invoke(self, messages: list[dict[str, Any]]) -> None:
        event = {"Records": [self._record(m) for m in messages]}
        context = LocalContext(self._function_name, self._timeout)
        response = self._handler(event, context) or {}
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        for message in messages:
            if message["MessageId"] not in failed:
                self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"])
        if failed:
            logger.warning("records failed", extra={"operation": self._function_name, "failed": len(failed)})

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        body = message["Body"]
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": body,
            "attributes": message.get("Attributes", {}),
            "messageAttributes": message.get("MessageAttributes", {}),
            "md5OfBody": message.get("MD5OfBody") or hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": self._arn,
            "awsRegion": "us-east-1",
        }


class Schedule:
    """Invokes a handler with a scheduled event every ``interval_seconds`` (moto's scheduled rules never fire)."""

    def __init__(
        self,
        handler: Callable[[dict[str, Any], Any], Any],
        *,
        rule_name: str,
        function_name: str,
        interval_seconds: float,
        timeout_seconds: float,
    ) -> None:
        self._handler = handler
        self._rule_name = rule_name
        self._function_name = function_name
        self._interval = interval_seconds
        self._timeout = timeout_seconds

    def run(self, stop: threading.Event) -> None:
        """Fire every interval until ``stop`` is set (the first run is one interval after start)."""
        while not stop.wait(self._interval):
            # The top of a thread: a failed run is logged and the schedule goes on.
            try:
                self._handler(scheduled_event(self._rule_name), LocalContext(self._function_name, self._timeout))
            except Exception:
                logger.exception("scheduled run failed", extra={"operation": self._function_name})
