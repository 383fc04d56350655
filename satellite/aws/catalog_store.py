"""The catalog store on DynamoDB: one partition per team, one Query loads a team's whole catalog.

The key design is written next to ``CatalogTable`` in ``template.yaml``. In short: an ``INST`` item per
installation holds its configuration, status and a pointer (generation id and part count) to its
catalog, which lives in immutable gzip JSON ``CAT`` parts. Replacing a catalog writes a new
generation's parts first, then moves the pointer in one transaction that also bumps the team's
``VERSION`` item, then deletes the old generation. A reader that follows a pointer therefore reads
either the whole old generation or the whole new one; a pointer whose parts vanished mid-read (a
concurrent replace deleted them) makes the reader read again.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from satellite.aws.parts import PART_BYTES, Generation, PartTable, collect, decode_json, encode_json, part_ref, split
from satellite.catalog import (
    CachedResource,
    CachedResourceTemplate,
    CachedTool,
    DiscoveryState,
    ErrorClass,
    InstallationCatalog,
    InstallationStatus,
    Status,
    TeamCatalog,
)
from satellite.errors import ConflictError, DuplicateSlug, InvalidInstallation, NotFound, StoreError
from satellite.installation import Installation, Transport
from satellite.jsonutil import compact_json

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

    from satellite.catalog import DiscoveredCatalog

__all__ = ["PART_BYTES", "DynamoCatalogStore"]

logger = logging.getLogger(__name__)

VERSION_SK = "VERSION"
_KIND_VERSION = "version"
_KIND_INSTALLATION = "installation"
_KIND_SLUG = "slug"
_KIND_PART = "catalog_part"
_SHARED_OWNER = "*"
_CONDITION_FAILED = "ConditionalCheckFailed"
_TRANSACTION_CONFLICT = "TransactionConflict"
_REASONS_IN_MESSAGE = re.compile(r"\[([^\]]*)\]\s*$")
_DISCOVERY_OUTCOMES = frozenset({DiscoveryState.SUCCESS, DiscoveryState.FAILED, DiscoveryState.TIMEOUT})
# A discovery claim: the configuration hash being discovered and when the claim lapses (a crashed discovery
# must not block the installation forever).
_CLAIM_NAMES = {"#claim_hash": "claim_hash", "#claim_until": "claim_until"}

_Item = dict[str, "AttributeValueTypeDef"]


class DynamoCatalogStore:
    """:class:`satellite.ports.CatalogStore` on one DynamoDB table (see ``CatalogTable`` in template.yaml).

    Args:
        table_name: the physical table name.
        client: a low-level DynamoDB client; by default one is created here (it honours ``AWS_ENDPOINT_URL``).
        part_bytes: the largest compressed payload per catalog part (tests use small parts).
        read_attempts: how often a load reads again when a concurrent replace deleted the parts it pointed to.
        transaction_attempts: how often a transaction cancelled only by a concurrent transaction is retried.
    """

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        part_bytes: int = PART_BYTES,
        read_attempts: int = 8,
        transaction_attempts: int = 5,
    ) -> None:
        if not 0 < part_bytes <= PART_BYTES:
            raise ValueError(f"part_bytes must be between 1 and {PART_BYTES}")
        self._table = table_name
        self._client: DynamoDBClient = client if client is not None else boto3.client("dynamodb")
        self._part_bytes = part_bytes
        self._read_attempts = max(1, read_attempts)
        self._transaction_attempts = max(1, transaction_attempts)
        self._parts = PartTable(self._client, table_name, _KIND_PART)

    def catalog_version(self, team_id: str) -> int:
        """The team's catalog version: it moves whenever anything the gateway serves changes (0 if none).

        Raises:
            StoreError: DynamoDB failed.
        """
        with _aws_errors("catalog_version"):
            response = self._client.get_item(
                TableName=self._table,
                Key=_key(team_id, VERSION_SK),
                ConsistentRead=True,
                ProjectionExpression="#v",
                ExpressionAttributeNames={"#v": "version"},
            )
        item = response.get("Item")
        return int(item["version"]["N"]) if item and "version" in item else 0

    def load_catalog(self, team_id: str) -> TeamCatalog:
        """The team's whole catalog in one consistent snapshot (never a half-replaced installation).

        Raises:
            StoreError: DynamoDB failed, a stored item is unreadable, or the catalog kept changing
                under the reader for ``read_attempts`` reads.
        """
        for attempt in range(1, self._read_attempts + 1):
            catalog = self._assemble(team_id, self._query_team(team_id))
            if catalog is not None:
                return catalog
            logger.info(
                "catalog generation replaced during the read; reading again",
                extra={"operation": "load_catalog", "team_id": team_id, "attempt": attempt},
            )
        raise StoreError(
            f"the catalog of team {team_id!r} changed during each of {self._read_attempts} reads; try again"
        )

    def add_installation(self, installation: Installation) -> None:
        """Add a new installation with status ``never``.

        Raises:
            DuplicateSlug: the team already has an installation with this slug for the same owner.
            ConflictError: the installation id already exists.
            StoreError: DynamoDB failed.
        """
        team_id, installation_id = installation.team_id, installation.installation_id
        now = _iso(_now())
        item: _Item = {
            **_key(team_id, _installation_sk(installation_id)),
            "kind": {"S": _KIND_INSTALLATION},
            "installation_id": {"S": installation_id},
            "config": {"S": compact_json(installation.to_dict())},
            "slug": {"S": installation.slug},
            "owner": {"S": _owner(installation)},
            "config_hash": {"S": installation.config_hash},
            "status": {"S": Status.NEVER.value},
            "discovery": {"S": DiscoveryState.NEVER.value},
            "changed_at": {"S": now},
            "written_at": {"S": now},
        }
        failed = self._transact(
            "add_installation",
            [
                {"Put": {"TableName": self._table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
                self._put_slug_guard(installation, now),
                self._bump_version(team_id, now),
            ],
        )
        if 0 in failed:
            raise ConflictError(f"installation {installation_id!r} already exists in team {team_id!r}")
        if 1 in failed:
            raise DuplicateSlug(installation.slug)
        logger.info(
            "installation added",
            extra={"operation": "add_installation", "team_id": team_id, "installation_id": installation_id},
        )

    def update_installation(self, installation: Installation) -> None:
        """Replace an installation's configuration, keeping its status and cached entries.

        A changed slug or owner moves the slug guard in the same transaction.

        Raises:
            NotFound: no such installation.
            DuplicateSlug: the new slug is taken.
            ConflictError: the installation was changed concurrently.
            StoreError: DynamoDB failed.
        """
        team_id, installation_id = installation.team_id, installation.installation_id
        current = self._get_installation(team_id, installation_id)
        if current is None:
            raise NotFound(f"team {team_id!r} has no installation {installation_id!r}")
        old_slug, old_owner = current["slug"]["S"], current["owner"]["S"]
        new_owner = _owner(installation)
        now = _iso(_now())
        items: list[TransactWriteItemTypeDef] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _key(team_id, _installation_sk(installation_id)),
                    "UpdateExpression": (
                        "SET #config = :config, #hash = :hash, #slug = :slug, #owner = :owner, #written = :now"
                    ),
                    "ConditionExpression": "attribute_exists(pk) AND #slug = :old_slug AND #owner = :old_owner",
                    "ExpressionAttributeNames": {
                        "#config": "config",
                        "#hash": "config_hash",
                        "#slug": "slug",
                        "#owner": "owner",
                        "#written": "written_at",
                    },
                    "ExpressionAttributeValues": {
                        ":config": {"S": compact_json(installation.to_dict())},
                        ":hash": {"S": installation.config_hash},
                        ":slug": {"S": installation.slug},
                        ":owner": {"S": new_owner},
                        ":old_slug": {"S": old_slug},
                        ":old_owner": {"S": old_owner},
                        ":now": {"S": now},
                    },
                }
            },
            self._bump_version(team_id, now),
        ]
        moves_guard = (old_slug, old_owner) != (installation.slug, new_owner)
        if moves_guard:
            items.append(
                {
                    "Delete": {
                        "TableName": self._table,
                        "Key": _key(team_id, _slug_sk(old_owner, old_slug)),
                        "ConditionExpression": "attribute_not_exists(pk) OR installation_id = :id",
                        "ExpressionAttributeValues": {":id": {"S": installation_id}},
                    }
                }
            )
            items.append(self._put_slug_guard(installation, now))
        failed = self._transact("update_installation", items)
        if 0 in failed:
            if self._get_installation(team_id, installation_id) is None:
                raise NotFound(f"team {team_id!r} has no installation {installation_id!r}")
            raise ConflictError(f"installation {installation_id!r} changed concurrently; read it again and retry")
        if 3 in failed:
            raise DuplicateSlug(installation.slug)
        if failed:
            raise ConflictError(f"the slug guard of installation {installation_id!r} belongs to another installation")
        logger.info(
            "installation updated",
            extra={
                "operation": "update_installation",
                "team_id": team_id,
                "installation_id": installation_id,
                "slug_moved": moves_guard,
            },
        )

    def remove_installation(self, team_id: str, installation_id: str) -> None:
        """Remove an installation with its status and every cached tool, resource and template.

        Idempotent: removing an installation that is already gone only clears leftover catalog parts.

        Raises:
            StoreError: DynamoDB failed.
        """
        current = self._get_installation(team_id, installation_id)
        if current is not None:
            delete_installation: TransactWriteItemTypeDef = {
                "Delete": {
                    "TableName": self._table,
                    "Key": _key(team_id, _installation_sk(installation_id)),
                    "ConditionExpression": "attribute_exists(pk)",
                }
            }
            delete_guard: TransactWriteItemTypeDef = {
                "Delete": {
                    "TableName": self._table,
                    "Key": _key(team_id, _slug_sk(current["owner"]["S"], current["slug"]["S"])),
                    "ConditionExpression": "attribute_not_exists(pk) OR installation_id = :id",
                    "ExpressionAttributeValues": {":id": {"S": installation_id}},
                }
            }
            failed = self._transact("remove_installation", [delete_installation, delete_guard], bump_version_of=team_id)
            if failed == {1}:
                # The guard belongs to another installation: never delete it, but still remove this one.
                self._transact("remove_installation", [delete_installation], bump_version_of=team_id)
            # A failed condition on the installation means a concurrent remove won: it is gone either way.
        self._parts.delete(
            self._parts.query(_pk(team_id), f"{_installation_sk(installation_id)}#CAT#", installation_id, "pk, sk")
        )
        logger.info(
            "installation removed",
            extra={"operation": "remove_installation", "team_id": team_id, "installation_id": installation_id},
        )

    def replace_catalog(self, team_id: str, installation_id: str, discovered: DiscoveredCatalog) -> None:
        """Atomically replace an installation's tools, resources and templates and mark it online.

        Readers see either the old entries or the new ones, never a mix. An older ``discovered_at``
        never overwrites a newer one.

        Raises:
            NotFound: the installation was removed meanwhile.
            ConflictError: a newer discovery was already stored.
            StoreError: DynamoDB failed.
        """
        discovered_at = _iso(discovered.discovered_at)
        current = self._require_not_newer(team_id, installation_id, discovered_at, discovered.config_hash)
        generation = uuid.uuid4().hex
        parts = split(_encode_catalog(discovered), self._part_bytes)
        new_generation = _generation(team_id, installation_id, generation, len(parts))
        committed = False
        try:
            self._parts.put_all(new_generation, parts)
            for _attempt in range(self._transaction_attempts):
                failed = self._transact(
                    "replace_catalog",
                    [self._move_pointer(team_id, installation_id, generation, len(parts), discovered, current)],
                    bump_version_of=team_id,
                )
                if not failed:
                    committed = True
                    break
                # The pointer moved under us (or the item vanished, or a newer discovery landed): find out which.
                current = self._require_not_newer(team_id, installation_id, discovered_at, discovered.config_hash)
            else:
                raise ConflictError(f"installation {installation_id!r} kept changing while its catalog was replaced")
        finally:
            if not committed:
                self._parts.delete(new_generation.keys())
        old_generation = current.get("catalog_gen", {}).get("S")
        if old_generation:
            old_count = int(current.get("catalog_parts", {}).get("N", "0"))
            self._parts.delete(_generation(team_id, installation_id, old_generation, old_count).keys())
        logger.info(
            "catalog replaced",
            extra={
                "operation": "replace_catalog",
                "team_id": team_id,
                "installation_id": installation_id,
                "tools": len(discovered.tools),
                "parts": len(parts),
            },
        )

    def set_status(
        self,
        team_id: str,
        installation_id: str,
        status: InstallationStatus,
        expected: Collection[Status] | None = None,
        *,
        config_hash: str | None = None,
    ) -> None:
        """Conditionally set an installation's status, discovery state, error, classification and suggestion.

        The write succeeds only if the stored status is one of ``expected`` (any, when ``None``), the
        stored ``changed_at`` is not newer than ``status.changed_at`` and, when ``config_hash`` is given,
        the installation is still configured with that hash (a discovery outcome for an older
        configuration is never stored). A discovery outcome (``success``, ``failed``, ``timeout``)
        also releases the discovery claim.

        Raises:
            NotFound: no such installation.
            ConflictError: the condition failed.
            StoreError: DynamoDB failed.
        """
        changed_at = _iso(status.changed_at)
        names = {
            "#status": "status",
            "#changed": "changed_at",
            "#written": "written_at",
            "#discovery": "discovery",
        }
        values: _Item = {
            ":status": {"S": status.status.value},
            ":changed": {"S": changed_at},
            ":now": {"S": _iso(_now())},
            ":discovery": {"S": status.discovery.value},
        }
        condition = "attribute_exists(pk) AND (attribute_not_exists(#changed) OR #changed <= :changed)"
        if expected is not None:
            if not expected:
                self._raise_status_conflict(team_id, installation_id, status, expected)
            placeholders = []
            for index, allowed in enumerate(sorted({Status(s).value for s in expected})):
                values[f":expected{index}"] = {"S": allowed}
                placeholders.append(f":expected{index}")
            condition += f" AND #status IN ({', '.join(placeholders)})"
        if config_hash is not None:
            names["#config_hash"] = "config_hash"
            values[":config_hash"] = {"S": config_hash}
            condition += " AND (attribute_not_exists(#config_hash) OR #config_hash = :config_hash)"
        sets = ["#status = :status", "#changed = :changed", "#written = :now", "#discovery = :discovery"]
        removes = []
        optional: tuple[tuple[str, str | None], ...] = (
            ("last_error", status.last_error),
            ("failure_kind", status.failure_kind),
            ("error_class", None if status.error_class is None else status.error_class.value),
            ("suggestion", status.suggestion),
        )
        for attribute, value in optional:
            names[f"#{attribute}"] = attribute
            if value is None:
                removes.append(f"#{attribute}")
            else:
                values[f":{attribute}"] = {"S": value}
                sets.append(f"#{attribute} = :{attribute}")
        if status.discovery in _DISCOVERY_OUTCOMES:
            names.update(_CLAIM_NAMES)
            removes.extend(_CLAIM_NAMES)
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        failed = self._transact(
            "set_status",
            [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": _key(team_id, _installation_sk(installation_id)),
                        "UpdateExpression": expression,
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            ],
            bump_version_of=team_id,
        )
        if failed:
            self._raise_status_conflict(team_id, installation_id, status, expected, config_hash)
        logger.info(
            "status set",
            extra={
                "operation": "set_status",
                "team_id": team_id,
                "installation_id": installation_id,
                "status": status.status.value,
                "discovery": status.discovery.value,
            },
        )

    def claim_discovery(
        self,
        team_id: str,
        installation_id: str,
        config_hash: str,
        *,
        status: Status,
        claimed_at: datetime,
        lease_until: datetime,
        not_discovered_since: datetime | None = None,
    ) -> None:
        """Claim the discovery of an installation as configured with ``config_hash``; marks it ``discovering``.

        Sets the discovery state to ``discovering`` and the status to ``status`` at ``claimed_at``, keeping the
        last error until an outcome replaces it. At most one claim per configuration hash is live: the write
        succeeds only if the installation is still configured with ``config_hash``, no other claim on that hash
        lasts beyond now, the stored ``changed_at`` is not newer than ``claimed_at`` and, when
        ``not_discovered_since`` is given, no discovery of this hash started at or after that moment. The claim
        ends at ``lease_until`` or when an outcome is stored (:meth:`replace_catalog`, :meth:`set_status`).

        Raises:
            NotFound: no such installation.
            ConflictError: another discovery holds the claim, the configuration changed, a newer status was
                written, or the hash was already discovered since ``not_discovered_since``.
            StoreError: DynamoDB failed.
        """
        names = {
            "#status": "status",
            "#changed": "changed_at",
            "#written": "written_at",
            "#discovery": "discovery",
            "#config_hash": "config_hash",
            **_CLAIM_NAMES,
        }
        now = _iso(_now())
        values: _Item = {
            ":status": {"S": status.value},
            ":changed": {"S": _iso(claimed_at)},
            ":now": {"S": now},
            ":discovering": {"S": DiscoveryState.DISCOVERING.value},
            ":hash": {"S": config_hash},
            ":until": {"S": _iso(lease_until)},
        }
        condition = (
            "attribute_exists(pk) AND (attribute_not_exists(#changed) OR #changed <= :changed) "
            "AND (attribute_not_exists(#config_hash) OR #config_hash = :hash) "
            "AND (attribute_not_exists(#claim_hash) OR #claim_hash <> :hash OR #claim_until < :now)"
        )
        if not_discovered_since is not None:
            names.update({"#discovered": "discovered_at", "#discovered_hash": "discovered_config_hash"})
            values[":since"] = {"S": _iso(not_discovered_since)}
            condition += (
                " AND (attribute_not_exists(#discovered) OR attribute_not_exists(#discovered_hash) "
                "OR #discovered_hash <> :hash OR #discovered < :since)"
            )
        failed = self._transact(
            "claim_discovery",
            [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": _key(team_id, _installation_sk(installation_id)),
                        "UpdateExpression": (
                            "SET #status = :status, #changed = :changed, #written = :now, "
                            "#discovery = :discovering, #claim_hash = :hash, #claim_until = :until"
                        ),
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            ],
            bump_version_of=team_id,
        )
        if failed:
            current = self._get_installation(team_id, installation_id)
            if current is None:
                raise NotFound(f"team {team_id!r} has no installation {installation_id!r}")
            raise ConflictError(_claim_refusal(current, installation_id, config_hash, now, not_discovered_since))
        logger.info(
            "discovery claimed",
            extra={
                "operation": "claim_discovery",
                "team_id": team_id,
                "installation_id": installation_id,
                "config_hash": config_hash,
            },
        )

    def team_ids(self) -> list[str]:
        """Every team that has a catalog (a scan of the version items, for the rediscovery schedule).

        Raises:
            StoreError: DynamoDB failed.
        """
        request: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": "#kind = :version",
            "ProjectionExpression": "pk",
            "ExpressionAttributeNames": {"#kind": "kind"},
            "ExpressionAttributeValues": {":version": {"S": _KIND_VERSION}},
        }
        teams: list[str] = []
        while True:
            with _aws_errors("team_ids"):
                page = self._client.scan(**request)
            teams.extend(item["pk"]["S"].removeprefix("TEAM#") for item in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                return sorted(teams)
            request["ExclusiveStartKey"] = start

    def _raise_status_conflict(
        self,
        team_id: str,
        installation_id: str,
        status: InstallationStatus,
        expected: Collection[Status] | None,
        config_hash: str | None = None,
    ) -> NoReturn:
        current = self._get_installation(team_id, installation_id)
        if current is None:
            raise NotFound(f"team {team_id!r} has no installation {installation_id!r}")
        stored_hash = current.get("config_hash", {}).get("S")
        if config_hash is not None and stored_hash is not None and stored_hash != config_hash:
            raise ConflictError(
                f"status of installation {installation_id!r} not set to {status.status.value!r}: it is now "
                f"configured with hash {stored_hash}, not {config_hash} (the outcome is for an older configuration)"
            )
        wanted = "any" if expected is None else sorted(Status(s).value for s in expected)
        raise ConflictError(
            f"status of installation {installation_id!r} not set to {status.status.value!r}: it is "
            f"{current['status']['S']!r} since {current['changed_at']['S']} (expected {wanted}, "
            f"changed_at {_iso(status.changed_at)} must not be older)"
        )

    def _require_not_newer(self, team_id: str, installation_id: str, discovered_at: str, config_hash: str) -> _Item:
        current = self._get_installation(team_id, installation_id)
        if current is None:
            raise NotFound(f"team {team_id!r} has no installation {installation_id!r}; it was removed")
        stored_hash = current.get("config_hash", {}).get("S")
        if stored_hash is not None and stored_hash != config_hash:
            raise ConflictError(
                f"installation {installation_id!r} is now configured with hash {stored_hash}; a discovery of "
                f"the older configuration {config_hash} is not stored"
            )
        stored = current.get("discovered_at", {}).get("S")
        if stored is not None and stored > discovered_at:
            raise ConflictError(
                f"installation {installation_id!r} already has a newer discovery ({stored}) than {discovered_at}"
            )
        return current

    def _move_pointer(
        self,
        team_id: str,
        installation_id: str,
        generation: str,
        part_count: int,
        discovered: DiscoveredCatalog,
        current: _Item,
    ) -> TransactWriteItemTypeDef:
        now = _iso(_now())
        old_generation = current.get("catalog_gen", {}).get("S")
        values: _Item = {
            ":gen": {"S": generation},
            ":parts": {"N": str(part_count)},
            ":discovered": {"S": _iso(discovered.discovered_at)},
            ":filled_by": {"S": discovered.filled_by},
            ":hash": {"S": discovered.config_hash},
            ":warnings": {"L": [{"S": w} for w in discovered.warnings]},
            ":online": {"S": Status.ONLINE.value},
            ":success": {"S": DiscoveryState.SUCCESS.value},
            ":now": {"S": now},
        }
        if old_generation is None:
            same_pointer = "attribute_not_exists(#gen)"
        else:
            same_pointer = "#gen = :old_gen"
            values[":old_gen"] = {"S": old_generation}
        return {
            "Update": {
                "TableName": self._table,
                "Key": _key(team_id, _installation_sk(installation_id)),
                "UpdateExpression": (
                    "SET #gen = :gen, #parts = :parts, #discovered = :discovered, #filled_by = :filled_by, "
                    "#hash = :hash, #warnings = :warnings, #status = :online, #changed = :now, #written = :now, "
                    "#discovery = :success "
                    "REMOVE #last_error, #failure_kind, #error_class, #suggestion, #claim_hash, #claim_until"
                ),
                "ConditionExpression": (
                    "attribute_exists(pk) AND (attribute_not_exists(#discovered) OR #discovered <= :discovered) "
                    f"AND (attribute_not_exists(#config_hash) OR #config_hash = :hash) AND {same_pointer}"
                ),
                "ExpressionAttributeNames": {
                    "#gen": "catalog_gen",
                    "#parts": "catalog_parts",
                    "#discovered": "discovered_at",
                    "#filled_by": "filled_by",
                    "#hash": "discovered_config_hash",
                    "#warnings": "warnings",
                    "#status": "status",
                    "#changed": "changed_at",
                    "#written": "written_at",
                    "#last_error": "last_error",
                    "#failure_kind": "failure_kind",
                    "#error_class": "error_class",
                    "#suggestion": "suggestion",
                    "#discovery": "discovery",
                    "#config_hash": "config_hash",
                    **_CLAIM_NAMES,
                },
                "ExpressionAttributeValues": values,
            }
        }

    def _put_slug_guard(self, installation: Installation, now: str) -> TransactWriteItemTypeDef:
        return {
            "Put": {
                "TableName": self._table,
                "Item": {
                    **_key(installation.team_id, _slug_sk(_owner(installation), installation.slug)),
                    "kind": {"S": _KIND_SLUG},
                    "installation_id": {"S": installation.installation_id},
                    "written_at": {"S": now},
                },
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def _bump_version(self, team_id: str, now: str) -> TransactWriteItemTypeDef:
        return {
            "Update": {
                "TableName": self._table,
                "Key": _key(team_id, VERSION_SK),
                "UpdateExpression": "SET #kind = :kind, #written = :now ADD #v :one",
                "ExpressionAttributeNames": {"#kind": "kind", "#written": "written_at", "#v": "version"},
                "ExpressionAttributeValues": {":kind": {"S": _KIND_VERSION}, ":now": {"S": now}, ":one": {"N": "1"}},
            }
        }

    def _transact(
        self, operation: str, items: list[TransactWriteItemTypeDef], *, bump_version_of: str | None = None
    ) -> set[int]:
        # Returns the indexes of the items whose condition failed (empty on success). A cancellation caused
        # only by concurrent transactions on the same items is retried: every write of a team shares its
        # VERSION item, so concurrent discoveries of one team collide there by design.
        if bump_version_of is not None:
            items = [*items, self._bump_version(bump_version_of, _iso(_now()))]
        attempt = 0
        while True:
            attempt += 1
            try:
                self._client.transact_write_items(TransactItems=items)
            except ClientError as exc:
                if _error_code(exc) != "TransactionCanceledException":
                    raise _store_error(operation, exc) from exc
                reasons = _cancellation_reasons(exc)
                failed = {index for index, code in enumerate(reasons) if code == _CONDITION_FAILED}
                if failed:
                    return failed
                if attempt < self._transaction_attempts and all(
                    code in ("None", "", _TRANSACTION_CONFLICT) for code in reasons
                ):
                    logger.info(
                        "transaction conflicted with another; retrying",
                        extra={"operation": operation, "attempt": attempt},
                    )
                    time.sleep(random.uniform(0.005, 0.05) * attempt)
                    continue
                raise StoreError(f"{operation} failed: transaction cancelled ({', '.join(reasons)})") from exc
            except BotoCoreError as exc:
                raise StoreError(f"{operation} failed: {exc}") from exc
            return set()

    def _get_installation(self, team_id: str, installation_id: str) -> _Item | None:
        with _aws_errors("get_installation"):
            response = self._client.get_item(
                TableName=self._table, Key=_key(team_id, _installation_sk(installation_id)), ConsistentRead=True
            )
        return response.get("Item")

    def _query_team(self, team_id: str) -> list[_Item]:
        # Descending order reads VERSION first (it sorts after INST# and SLUG#), so the version returned is
        # never newer than the data; and a catalog part is read before the pointer that names it.
        return list(
            self._query(
                "load_catalog",
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": _pk(team_id)}},
                ScanIndexForward=False,
            )
        )

    def _query(self, operation: str, **query: Any) -> Iterator[_Item]:
        query = {"TableName": self._table, "ConsistentRead": True, **query}
        while True:
            with _aws_errors(operation):
                page = self._client.query(**query)
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return
            query["ExclusiveStartKey"] = start

    def _assemble(self, team_id: str, items: Sequence[_Item]) -> TeamCatalog | None:
        version = 0
        installations: list[_Item] = []
        parts: dict[tuple[str, str, int], bytes] = {}
        for item in items:
            kind = item.get("kind", {}).get("S")
            if kind == _KIND_VERSION:
                version = int(item["version"]["N"])
            elif kind == _KIND_INSTALLATION:
                installations.append(item)
            elif kind == _KIND_PART:
                parts[part_ref(item)] = item["data"]["B"]
        entries: list[InstallationCatalog] = []
        for item in sorted(installations, key=lambda i: i["sk"]["S"]):
            installation_id = item["installation_id"]["S"]
            generation = item.get("catalog_gen", {}).get("S")
            payload: Mapping[str, Any] = {}
            if generation is not None:
                present = collect(parts, installation_id, generation, int(item["catalog_parts"]["N"]))
                if present is None:
                    return None
                payload = _decode_catalog(b"".join(present), installation_id)
            entries.append(_installation_catalog(item, payload))
        return TeamCatalog(team_id=team_id, version=version, installations=tuple(entries))


def _installation_catalog(item: _Item, payload: Mapping[str, Any]) -> InstallationCatalog:
    installation_id = item["installation_id"]["S"]
    try:
        installation = Installation.from_dict(json.loads(item["config"]["S"]))
        error_class = item.get("error_class", {}).get("S")
        status = InstallationStatus(
            status=Status(item["status"]["S"]),
            changed_at=datetime.fromisoformat(item["changed_at"]["S"]),
            last_error=item.get("last_error", {}).get("S"),
            failure_kind=item.get("failure_kind", {}).get("S"),
            discovery=DiscoveryState(item.get("discovery", {}).get("S", _legacy_discovery(item))),
            error_class=None if error_class is None else ErrorClass(error_class),
            suggestion=item.get("suggestion", {}).get("S"),
        )
        discovered_at = item.get("discovered_at", {}).get("S")
        return InstallationCatalog(
            installation=installation,
            status=status,
            tools=tuple(
                CachedTool(
                    definition=entry["definition"],
                    discovered_at=datetime.fromisoformat(entry["discovered_at"]),
                    transport=Transport(entry["transport"]),
                    search_embedding=(
                        None if entry.get("search_embedding") is None else base64.b64decode(entry["search_embedding"])
                    ),
                )
                for entry in payload.get("tools", ())
            ),
            resources=tuple(
                CachedResource(
                    definition=entry["definition"],
                    discovered_at=datetime.fromisoformat(entry["discovered_at"]),
                    transport=Transport(entry["transport"]),
                )
                for entry in payload.get("resources", ())
            ),
            templates=tuple(
                CachedResourceTemplate(
                    definition=entry["definition"],
                    discovered_at=datetime.fromisoformat(entry["discovered_at"]),
                    transport=Transport(entry["transport"]),
                )
                for entry in payload.get("templates", ())
            ),
            discovered_at=None if discovered_at is None else datetime.fromisoformat(discovered_at),
            filled_by=item.get("filled_by", {}).get("S"),
            discovered_config_hash=item.get("discovered_config_hash", {}).get("S"),
            warnings=tuple(w["S"] for w in item.get("warnings", {}).get("L", ())),
        )
    except (InvalidInstallation, KeyError, ValueError, TypeError) as exc:
        raise StoreError(f"stored installation {installation_id!r} is unreadable: {exc!r}") from exc


def _legacy_discovery(item: _Item) -> str:
    # Items written before the discovery state existed: a stored catalog means a discovery succeeded.
    return (DiscoveryState.SUCCESS if "discovered_at" in item else DiscoveryState.NEVER).value


def _claim_refusal(
    current: _Item, installation_id: str, config_hash: str, now: str, not_discovered_since: datetime | None
) -> str:
    stored_hash = current.get("config_hash", {}).get("S")
    if stored_hash is not None and stored_hash != config_hash:
        return f"installation {installation_id!r} is now configured with hash {stored_hash}, not {config_hash}"
    claim_hash = current.get("claim_hash", {}).get("S")
    claim_until = current.get("claim_until", {}).get("S", "")
    if claim_hash == config_hash and claim_until >= now:
        return f"a discovery of installation {installation_id!r} is already running (claimed until {claim_until})"
    discovered_at = current.get("discovered_at", {}).get("S", "")
    if (
        not_discovered_since is not None
        and current.get("discovered_config_hash", {}).get("S") == config_hash
        and discovered_at >= _iso(not_discovered_since)
    ):
        return f"installation {installation_id!r} was already discovered at {discovered_at}"
    return f"installation {installation_id!r} has a newer status since {current.get('changed_at', {}).get('S')}"


def _encode_catalog(discovered: DiscoveredCatalog) -> bytes:
    def entry(definition: Mapping[str, Any], discovered_at: datetime, transport: Transport) -> dict[str, Any]:
        return {"definition": definition, "discovered_at": _iso(discovered_at), "transport": transport.value}

    payload = {
        "tools": [
            {
                **entry(t.definition, t.discovered_at, t.transport),
                "search_embedding": (
                    None if t.search_embedding is None else base64.b64encode(t.search_embedding).decode("ascii")
                ),
            }
            for t in discovered.tools
        ],
        "resources": [entry(r.definition, r.discovered_at, r.transport) for r in discovered.resources],
        "templates": [entry(t.definition, t.discovered_at, t.transport) for t in discovered.templates],
    }
    return encode_json(payload)


def _decode_catalog(data: bytes, installation_id: str) -> Mapping[str, Any]:
    payload = decode_json(data, f"catalog of installation {installation_id!r}")
    if not isinstance(payload, Mapping):
        raise StoreError(f"the stored catalog of installation {installation_id!r} is not a JSON object")
    return payload


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    # Fixed-width ISO-8601 in UTC, so conditions can compare stored timestamps as strings; naive means UTC.
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _owner(installation: Installation) -> str:
    return installation.user_id or _SHARED_OWNER


def _pk(team_id: str) -> str:
    return f"TEAM#{team_id}"


def _installation_sk(installation_id: str) -> str:
    return f"INST#{installation_id}"


def _generation(team_id: str, installation_id: str, generation: str, count: int) -> Generation:
    # Part keys: INST#<installation_id>#CAT#<generation>#<0000>.
    prefix = f"{_installation_sk(installation_id)}#CAT#{generation}"
    return Generation(_pk(team_id), prefix, installation_id, generation, count)


def _slug_sk(owner: str, slug: str) -> str:
    return f"SLUG#{owner}#{slug}"


def _key(team_id: str, sk: str) -> _Item:
    return {"pk": {"S": _pk(team_id)}, "sk": {"S": sk}}


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _cancellation_reasons(exc: ClientError) -> list[str]:
    reasons = exc.response.get("CancellationReasons")
    if isinstance(reasons, list):
        return [str(reason.get("Code") or "None") for reason in reasons]
    # Some emulators only list the reasons in the message: "... specific reasons [None, ConditionalCheckFailed]".
    match = _REASONS_IN_MESSAGE.search(str(exc.response.get("Error", {}).get("Message", "")))
    return [code.strip() for code in match[1].split(",")] if match else []


def _store_error(operation: str, exc: ClientError) -> StoreError:
    code = _error_code(exc)
    message = exc.response.get("Error", {}).get("Message", "")
    if code == "ConditionalCheckFailedException":
        return ConflictError(f"{operation}: a concurrent write changed the item ({message})")
    return StoreError(f"{operation} failed: {code}: {message}")


@contextmanager
def _aws_errors(operation: str) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        raise _store_error(operation, exc) from exc
    except BotoCoreError as exc:
        raise StoreError(f"{operation} failed: {exc}") from exc
