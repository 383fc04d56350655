"""The tool-metadata store on DynamoDB: per-tool token counts and per-installation totals, one partition per team.

The key design is written next to ``MetadataTable`` in ``template.yaml``. An ``INST`` pointer item per installation
holds its totals and names its current generation; the tools live in immutable gzip JSON ``PART`` items, one per
``mcp.tools.discovered`` event part (see :mod:`satellite.metadata`), replaced with the generation scheme of
:mod:`satellite.aws.parts`: parts are staged first, the pointer moves in one conditional write once every part is
there, and older generations are swept afterwards. Readers see the old metadata or the new one, never a mix, and a
replayed part writes nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3

from satellite.aws.parts import Generation, PartTable, aws_errors, decode_json, encode_json
from satellite.errors import ConflictError, StoreError
from satellite.metadata import (
    InstallationMetadata,
    InstallationTotals,
    InvalidMetadataEvent,
    Outcome,
    iso_utc,
    token_savings,
    tools_of_parts,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from satellite.metadata import MetadataPart

__all__ = ["TOMBSTONE_DAYS", "DynamoMetadataStore"]

logger = logging.getLogger(__name__)

_KIND_INSTALLATION = "installation"
_KIND_REMOVED = "removed"
_KIND_PART = "metadata_part"
# A removed installation leaves a tombstone that refuses its late events; SQS keeps a message at most 14 days.
TOMBSTONE_DAYS = 15
_COUNTS = (
    "tool_count",
    "total_tokens",
    "total_tokens_o200k",
    "listed_tokens",
    "listed_tokens_o200k",
)

_Item = dict[str, "AttributeValueTypeDef"]


class DynamoMetadataStore:
    """Tool metadata on one DynamoDB table (see ``MetadataTable`` in template.yaml).

    Args:
        table_name: the physical table name.
        client: a low-level DynamoDB client; by default one is created here (it honours ``AWS_ENDPOINT_URL``).
        read_attempts: how often a read starts again when a concurrent replace swept the parts it pointed to.
    """

    def __init__(self, table_name: str, client: DynamoDBClient | None = None, *, read_attempts: int = 8) -> None:
        self._table = table_name
        self._client: DynamoDBClient = client if client is not None else boto3.client("dynamodb")
        self._parts = PartTable(self._client, table_name, _KIND_PART)
        self._read_attempts = max(1, read_attempts)

    def store_part(self, part: MetadataPart) -> Outcome:
        """Stage one event part; make its generation current once every part is staged, unless a newer one is.

        Idempotent: a part of the current generation, or of a discovery not newer than the stored one, writes
        nothing. Of two discoveries with the same ``discovered_at`` the first one stored stays.

        Raises:
            InvalidMetadataEvent: the staged parts of the generation disagree with its header.
            StoreError: DynamoDB failed.
        """
        totals = part.totals
        team_id, installation_id = part.team_id, totals.installation_id
        settled = self._settled(team_id, installation_id, totals.discovered_at, part.generation)
        if settled is not None:
            return settled
        generation = _generation(team_id, installation_id, totals.discovered_at, part.generation, part.parts)
        self._parts.put(
            generation,
            part.part,
            encode_json(list(part.tools)),
            attributes={"discovered_at": {"S": totals.discovered_at}},
            only_if_absent=True,
        )
        chunks = self._parts.read(generation)
        if chunks is None:
            return Outcome.STAGED
        tools_of_parts(totals, [decode_json(chunk, f"metadata part of {installation_id!r}") for chunk in chunks])
        try:
            with aws_errors("store_metadata"):
                self._client.put_item(
                    TableName=self._table,
                    Item=_pointer(team_id, part),
                    ConditionExpression="attribute_not_exists(pk) OR #discovered < :discovered",
                    ExpressionAttributeNames={"#discovered": "discovered_at"},
                    ExpressionAttributeValues={":discovered": {"S": totals.discovered_at}},
                )
        except ConflictError:
            # A concurrent delivery of another part of this generation committed it, or a newer discovery won.
            settled = self._settled(team_id, installation_id, totals.discovered_at, part.generation)
            if settled is Outcome.SUPERSEDED:
                self._parts.delete(generation.keys())
            return settled or Outcome.SUPERSEDED
        self._sweep(team_id, installation_id, totals.discovered_at)
        logger.info(
            "tool metadata replaced",
            extra={
                "operation": "store_metadata",
                "team_id": team_id,
                "installation_id": installation_id,
                "tools": totals.tool_count,
                "parts": part.parts,
            },
        )
        return Outcome.STORED

    def installation_totals(self, team_id: str, installation_id: str) -> InstallationTotals | None:
        """An installation's totals at its latest stored discovery (``None`` if none or removed).

        Raises:
            StoreError: DynamoDB failed or the stored item is unreadable.
        """
        pointer = self._get_pointer(team_id, installation_id)
        return None if pointer is None or _kind(pointer) != _KIND_INSTALLATION else _totals(pointer)

    def team_totals(self, team_id: str) -> list[InstallationTotals]:
        """Every installation's totals in the team (one Query of the pointer items, without the tools).

        Raises:
            StoreError: DynamoDB failed or a stored item is unreadable.
        """
        query: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {":pk": {"S": _pk(team_id)}, ":prefix": {"S": "INST#"}},
        }
        totals: list[InstallationTotals] = []
        while True:
            with aws_errors("team_totals"):
                page = self._client.query(**query)
            totals.extend(_totals(item) for item in page.get("Items", []) if _kind(item) == _KIND_INSTALLATION)
            start = page.get("LastEvaluatedKey")
            if not start:
                return totals
            query["ExclusiveStartKey"] = start

    def installation_metadata(self, team_id: str, installation_id: str) -> InstallationMetadata | None:
        """An installation's totals and every tool's metadata from one generation (``None`` if none or removed).

        Raises:
            StoreError: DynamoDB failed, a stored item is unreadable, or the metadata was replaced during each of
                ``read_attempts`` reads.
        """
        for attempt in range(1, self._read_attempts + 1):
            pointer = self._get_pointer(team_id, installation_id)
            if pointer is None or _kind(pointer) != _KIND_INSTALLATION:
                return None
            totals = _totals(pointer)
            generation = _generation(
                team_id, installation_id, totals.discovered_at, pointer["gen"]["S"], int(pointer["parts"]["N"])
            )
            chunks = self._parts.read(generation)
            if chunks is not None:
                slices = [decode_json(chunk, f"metadata of {installation_id!r}") for chunk in chunks]
                try:
                    tools = tools_of_parts(totals, slices)
                except InvalidMetadataEvent as exc:
                    raise StoreError(f"the stored metadata of {installation_id!r} is unreadable: {exc}") from exc
                return InstallationMetadata(totals=totals, generation=generation.generation, tools=tuple(tools))
            logger.info(
                "metadata replaced during the read; reading again",
                extra={"operation": "installation_metadata", "installation_id": installation_id, "attempt": attempt},
            )
        raise StoreError(f"the metadata of {installation_id!r} changed during each of {self._read_attempts} reads")

    def remove_installation(self, team_id: str, installation_id: str) -> None:
        """Remove an installation's metadata; events of discoveries before now are refused from then on.

        A tombstone replaces the pointer (it expires after :data:`TOMBSTONE_DAYS` through the table's TTL), then
        every part is deleted. Idempotent.

        Raises:
            StoreError: DynamoDB failed.
        """
        now = datetime.now(UTC)
        with aws_errors("remove_metadata"):
            self._client.put_item(
                TableName=self._table,
                Item={
                    **_key(team_id, _pointer_sk(installation_id)),
                    "kind": {"S": _KIND_REMOVED},
                    "installation_id": {"S": installation_id},
                    "discovered_at": {"S": iso_utc(now)},
                    "written_at": {"S": iso_utc(now)},
                    "expires_at": {"N": str(int((now + timedelta(days=TOMBSTONE_DAYS)).timestamp()))},
                },
            )
        self._parts.delete(self._parts.query(_pk(team_id), _parts_prefix(installation_id), installation_id, "pk"))
        logger.info(
            "tool metadata removed",
            extra={"operation": "remove_metadata", "team_id": team_id, "installation_id": installation_id},
        )

    def token_savings(self, team_id: str) -> dict[str, Any]:
        """The team's token savings (see :func:`satellite.metadata.token_savings`).

        Raises:
            StoreError: DynamoDB failed or a stored item is unreadable.
        """
        return token_savings(team_id, self.team_totals(team_id))

    def _settled(self, team_id: str, installation_id: str, discovered_at: str, generation: str) -> Outcome | None:
        # Whether the stored pointer already decides this part's fate: nothing to write if it is not older.
        pointer = self._get_pointer(team_id, installation_id)
        if pointer is None or pointer["discovered_at"]["S"] < discovered_at:
            return None
        if _kind(pointer) == _KIND_INSTALLATION and pointer.get("gen", {}).get("S") == generation:
            return Outcome.ALREADY_STORED
        return Outcome.SUPERSEDED

    def _sweep(self, team_id: str, installation_id: str, discovered_at: str) -> None:
        # Parts of older discoveries: the previous generation, and any staged that never completed or lost.
        items = self._parts.query(_pk(team_id), _parts_prefix(installation_id), installation_id, "discovered_at")
        self._parts.delete(item for item in items if item.get("discovered_at", {}).get("S", "") < discovered_at)

    def _get_pointer(self, team_id: str, installation_id: str) -> _Item | None:
        with aws_errors("get_metadata"):
            response = self._client.get_item(
                TableName=self._table, Key=_key(team_id, _pointer_sk(installation_id)), ConsistentRead=True
            )
        return response.get("Item")


def _pointer(team_id: str, part: MetadataPart) -> _Item:
    totals = part.totals
    return {
        **_key(team_id, _pointer_sk(totals.installation_id)),
        "kind": {"S": _KIND_INSTALLATION},
        "installation_id": {"S": totals.installation_id},
        "installation_name": {"S": totals.installation_name},
        "server_slug": {"S": totals.server_slug},
        "config_hash": {"S": totals.config_hash},
        "discovered_at": {"S": totals.discovered_at},
        "gen": {"S": part.generation},
        "parts": {"N": str(part.parts)},
        **{name: {"N": str(getattr(totals, name))} for name in _COUNTS},
        "written_at": {"S": iso_utc(datetime.now(UTC))},
    }


def _totals(item: _Item) -> InstallationTotals:
    try:
        return InstallationTotals(
            installation_id=item["installation_id"]["S"],
            installation_name=item["installation_name"]["S"],
            server_slug=item["server_slug"]["S"],
            config_hash=item["config_hash"]["S"],
            discovered_at=item["discovered_at"]["S"],
            tool_count=int(item["tool_count"]["N"]),
            total_tokens=int(item["total_tokens"]["N"]),
            total_tokens_o200k=int(item["total_tokens_o200k"]["N"]),
            listed_tokens=int(item["listed_tokens"]["N"]),
            listed_tokens_o200k=int(item["listed_tokens_o200k"]["N"]),
        )
    except (KeyError, ValueError) as exc:
        raise StoreError(f"stored metadata item {item.get('sk', {}).get('S')!r} is unreadable: {exc!r}") from exc


def _kind(item: _Item) -> str | None:
    return item.get("kind", {}).get("S")


def _pk(team_id: str) -> str:
    return f"TEAM#{team_id}"


def _pointer_sk(installation_id: str) -> str:
    return f"INST#{installation_id}"


def _parts_prefix(installation_id: str) -> str:
    return f"PART#{installation_id}#"


def _generation(team_id: str, installation_id: str, discovered_at: str, generation: str, count: int) -> Generation:
    # Part keys: PART#<installation_id>#<discovered_at>#<generation>#<0000>; the digest makes replays land on them.
    prefix = f"{_parts_prefix(installation_id)}{discovered_at}#{generation}"
    return Generation(_pk(team_id), prefix, installation_id, generation, count)


def _key(team_id: str, sk: str) -> _Item:
    return {"pk": {"S": _pk(team_id)}, "sk": {"S": sk}}
