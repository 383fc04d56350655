"""Generations of immutable parts: how the DynamoDB stores replace a large value with no moment of partial reads.

A value that may exceed one item (an installation's catalog, its tool metadata) is stored as a *generation*:
immutable part items ``<prefix>#<0000>``, ``<prefix>#<0001>``... in the owner's partition, each holding a slice
of bytes. A pointer item (owned by each store) names the current generation and its part count. A writer puts
every part of the new generation first, then moves the pointer in one conditional write, then deletes the old
generation's parts. A reader that follows a pointer therefore reads either the whole old generation or the whole
new one; a pointer whose parts vanished (a concurrent replace deleted them after moving the pointer) makes the
reader read again.

Part items carry ``kind``, ``installation_id`` (the owner: prefix queries check it, since one id could be a
prefix of another), ``gen``, ``part`` (index), ``data`` (bytes) and ``written_at``, plus any store-specific
attributes.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from satellite.errors import ConflictError, StoreError
from satellite.jsonutil import compact_json

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

__all__ = [
    "PART_BYTES",
    "Generation",
    "PartTable",
    "aws_errors",
    "collect",
    "decode_json",
    "encode_json",
    "part_ref",
    "split",
]

logger = logging.getLogger(__name__)

# DynamoDB items are limited to 400 KB including names; 350 KB of payload leaves room for keys and attributes.
PART_BYTES = 350 * 1024

_Item = dict[str, "AttributeValueTypeDef"]


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation's parts: sort keys ``<sk_prefix>#<index:04d>`` in partition ``pk``, owned by ``owner``."""

    pk: str
    sk_prefix: str
    owner: str
    generation: str
    count: int

    def key(self, index: int) -> _Item:
        return {"pk": {"S": self.pk}, "sk": {"S": f"{self.sk_prefix}#{index:04d}"}}

    def keys(self) -> list[_Item]:
        return [self.key(index) for index in range(self.count)]


def split(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into slices of at most ``size`` bytes (one empty slice for empty data)."""
    return [data[start : start + size] for start in range(0, len(data), size)] or [b""]


def encode_json(payload: Any) -> bytes:
    """Compact JSON, gzipped; ``mtime=0`` keeps the bytes a pure function of the payload."""
    text = compact_json(payload)
    return gzip.compress(text.encode("utf-8"), mtime=0)


def decode_json(data: bytes, what: str) -> Any:
    """The payload :func:`encode_json` stored.

    Raises:
        StoreError: the bytes are not gzipped JSON (``what`` names the value in the message).
    """
    try:
        return json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise StoreError(f"the stored {what} is unreadable: {exc}") from exc


def part_ref(item: Mapping[str, Any]) -> tuple[str, str, int]:
    """``(owner, generation, index)`` of a part item, as :func:`collect` looks parts up."""
    return item["installation_id"]["S"], item["gen"]["S"], int(item["part"]["N"])


def collect(parts: Mapping[tuple[str, str, int], bytes], owner: str, generation: str, count: int) -> list[bytes] | None:
    """The ``count`` slices of one generation in order, or ``None`` when any is missing (read again)."""
    chunks = [parts.get((owner, generation, index)) for index in range(count)]
    present = [chunk for chunk in chunks if chunk is not None]
    return present if len(present) == count else None


class PartTable:
    """Puts, reads and deletes part items of one kind in one table.

    Args:
        client: a low-level DynamoDB client.
        table_name: the physical table name.
        kind: the ``kind`` attribute of the part items, e.g. ``catalog_part``.
    """

    def __init__(self, client: DynamoDBClient, table_name: str, kind: str) -> None:
        self._client = client
        self._table = table_name
        self._kind = kind

    def put(
        self,
        generation: Generation,
        index: int,
        data: bytes,
        *,
        attributes: Mapping[str, AttributeValueTypeDef] | None = None,
        only_if_absent: bool = False,
    ) -> bool:
        """Write one part; with ``only_if_absent`` an existing part is kept and ``False`` returned.

        Raises:
            StoreError: DynamoDB failed.
        """
        item: _Item = {
            **generation.key(index),
            **(attributes or {}),
            "kind": {"S": self._kind},
            "installation_id": {"S": generation.owner},
            "gen": {"S": generation.generation},
            "part": {"N": str(index)},
            "data": {"B": data},
            "written_at": {"S": _now()},
        }
        try:
            with aws_errors(f"put {self._kind}"):
                if only_if_absent:
                    self._client.put_item(
                        TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
                    )
                else:
                    self._client.put_item(TableName=self._table, Item=item)
        except ConflictError:
            return False
        return True

    def put_all(self, generation: Generation, chunks: Sequence[bytes]) -> None:
        """Write every part of a generation; on failure the parts written so far are deleted again.

        Raises:
            StoreError: DynamoDB failed.
        """
        written = 0
        try:
            for index, data in enumerate(chunks):
                self.put(generation, index, data)
                written += 1
        except StoreError:
            self.delete(generation.key(index) for index in range(written))
            raise

    def read(self, generation: Generation) -> list[bytes] | None:
        """The slices of one generation in order, or ``None`` when any is missing (a replace deleted it).

        Raises:
            StoreError: DynamoDB failed.
        """
        items = self.query(generation.pk, f"{generation.sk_prefix}#", generation.owner)
        parts = {part_ref(item): item["data"]["B"] for item in items if "data" in item}
        return collect(parts, generation.owner, generation.generation, generation.count)

    def query(self, pk: str, sk_prefix: str, owner: str, projection: str | None = None) -> list[_Item]:
        """Part items of ``owner`` whose sort key starts with ``sk_prefix`` (consistent read).

        ``projection`` lists attribute names to return (``installation_id`` is always added).

        Raises:
            StoreError: DynamoDB failed.
        """
        query: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {":pk": {"S": pk}, ":prefix": {"S": sk_prefix}},
        }
        if projection is not None:
            names = sorted({*projection.replace(" ", "").split(","), "pk", "sk", "installation_id"})
            query["ProjectionExpression"] = ", ".join(f"#a{index}" for index in range(len(names)))
            query["ExpressionAttributeNames"] = {f"#a{index}": name for index, name in enumerate(names)}
        items: list[_Item] = []
        while True:
            with aws_errors(f"query {self._kind}"):
                page = self._client.query(**query)
            items.extend(page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                break
            query["ExclusiveStartKey"] = start
        # The prefix of owner "a" could match parts of an owner such as "a#CAT#x": check the owner attribute.
        return [item for item in items if item.get("installation_id", {}).get("S") == owner]

    def delete(self, keys: Iterable[_Item]) -> None:
        """Delete parts, best effort.

        Leftover parts are never served (no pointer names them) and the stores sweep them later, so a failed
        clean-up is logged rather than failing a write that already succeeded.
        """
        for key in keys:
            try:
                self._client.delete_item(TableName=self._table, Key={"pk": key["pk"], "sk": key["sk"]})
            except (ClientError, BotoCoreError) as exc:
                logger.warning(
                    "could not delete a part; it stays until it is swept",
                    extra={"operation": f"delete {self._kind}", "sk": key["sk"].get("S"), "error": str(exc)},
                )


@contextmanager
def aws_errors(operation: str) -> Iterator[None]:
    """Translate botocore errors raised inside into :class:`StoreError` (a failed condition: ConflictError).

    Raises:
        ConflictError: a condition expression failed.
        StoreError: any other DynamoDB or botocore failure.
    """
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        message = exc.response.get("Error", {}).get("Message", "")
        if code == "ConditionalCheckFailedException":
            raise ConflictError(f"{operation}: a concurrent write changed the item ({message})") from exc
        raise StoreError(f"{operation} failed: {code}: {message}") from exc
    except BotoCoreError as exc:
        raise StoreError(f"{operation} failed: {exc}") from exc


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
