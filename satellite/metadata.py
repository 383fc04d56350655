"""The tool-metadata pipeline's core: ``mcp.tools.discovered`` events, their ingestion, and token savings. Pure.

**The event.** After each successful discovery the publisher sends, with source ``satellite.discovery`` and
detail-type ``mcp.tools.discovered``, a detail holding seed 000's payload plus what replays need::

    {"schema_version": 1, "installation_id", "installation_name", "team_id", "server_slug", "config_hash",
     "discovered_at": ISO-8601 UTC (fixed width), "tool_count", "total_tokens", "total_tokens_o200k",
     "listed_tokens", "listed_tokens_o200k", "encoding": "cl100k_base",
     "generation": digest of the whole catalog, "part": 0, "parts": 1,
     "tools": [{"tool_name", "description", "input_schema", "token_count"}, ...]}

**Tokens.** ``token_count`` is :func:`satellite.tokens.tool_tokens` (name + description + compact JSON of the
input schema) in ``cl100k_base``: no tokenizer matches every client model (Claude and Gemini publish none), and
cl100k is the de-facto common estimate (the GPT-4 family, the seed's gpt-tokenizer, most MCP token counters), so
numbers compare with other tools. ``total_tokens_o200k`` repeats the total in ``o200k_base`` (the GPT-4o family)
because it costs about 0.1 s per 1,500 tools. ``listed_tokens`` counts the installation's tools as a client would
receive them in ``tools/list`` if the gateway exposed them directly: each full definition with its name
namespaced ``slug:tool``, as compact JSON joined by ``,``. Token savings compare that with the ``tools/list``
of the four meta-tools, counted the same way (see :func:`token_savings`).

**Size (EventBridge takes at most 256 KB per entry, and per PutEvents request).** A catalog whose detail fits in
:data:`PART_BYTES` (200 KB, leaving room for the envelope EventBridge adds before SQS) travels inline as one
event, exactly seed 000's shape. A larger catalog is split into self-describing parts: every part repeats the
header (ids, totals, ``generation``, ``parts``) and carries a slice of ``tools``. A claim check (payload
elsewhere, pointer in the event) was rejected: the pointer would name a catalog generation that the next
discovery deletes, so a delayed or replayed event would find nothing, and the publisher would need write access
to a second store. Parts need no store but the bus, and stay idempotent and atomic on the consumer: the batcher
stages each part under its ``generation`` (a digest of the whole catalog, so a replayed part lands on the same
key) and moves the installation's pointer to that generation only once every part is staged, in one conditional
write that refuses an older ``discovered_at``. A 1,500-tool catalog of realistic size (1.1 MB) travels as six
parts. A single tool whose entry alone exceeds the budget keeps its name and token count, and its description
and schema are left out with ``"omitted": ["description", "input_schema"]`` (logged, never silent).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from satellite.errors import InvalidInstallation
from satellite.jsonutil import compact_json
from satellite.tokens import count_tokens, tool_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from satellite.catalog import CachedTool, DiscoveredCatalog
    from satellite.installation import Installation

__all__ = [
    "DETAIL_TYPE",
    "ENCODING",
    "ENTRY_LIMIT_BYTES",
    "PART_BYTES",
    "SOURCE",
    "InstallationMetadata",
    "InstallationTotals",
    "InvalidMetadataEvent",
    "MetadataPart",
    "MetadataSink",
    "Outcome",
    "ToolMetadata",
    "build_events",
    "encode_detail",
    "entry_size",
    "ingest",
    "iso_utc",
    "listed_entry",
    "meta_tools_tokens",
    "parse_event",
    "token_savings",
    "tools_of_parts",
]

logger = logging.getLogger(__name__)

SOURCE = "satellite.discovery"
DETAIL_TYPE = "mcp.tools.discovered"
SCHEMA_VERSION = 1
ENCODING = "cl100k_base"
SECOND_ENCODING = "o200k_base"
ENTRY_LIMIT_BYTES = 256 * 1024
# EventBridge wraps the detail in an envelope (id, time, account, region, resources...) of a few hundred bytes
# before it reaches SQS; 200 KB of detail keeps both the entry and the SQS message far from their limits.
PART_BYTES = 200 * 1024
OMITTED = ("description", "input_schema")
_MAX_PARTS = 9999


class InvalidMetadataEvent(InvalidInstallation):
    """An ``mcp.tools.discovered`` event is malformed; ``field`` names the offending detail field."""


class Outcome(StrEnum):
    """What ingesting one event part did."""

    STAGED = "staged"  # stored; other parts of its generation are still missing
    STORED = "stored"  # the last part arrived: the installation's metadata now is this generation
    ALREADY_STORED = "already_stored"  # a replay of the current generation: nothing changed
    SUPERSEDED = "superseded"  # an older (or equally old) discovery than the stored one: nothing changed


@dataclass(frozen=True, slots=True)
class ToolMetadata:
    """One tool's metadata; ``omitted`` names fields left out because the tool alone exceeded an event."""

    tool_name: str
    description: str
    input_schema: Mapping[str, Any]
    token_count: int
    omitted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class InstallationTotals:
    """An installation's token totals at its latest stored discovery."""

    installation_id: str
    installation_name: str
    server_slug: str
    config_hash: str
    discovered_at: str
    tool_count: int
    total_tokens: int
    total_tokens_o200k: int
    listed_tokens: int
    listed_tokens_o200k: int


@dataclass(frozen=True, slots=True)
class InstallationMetadata:
    """An installation's totals with every tool's metadata, from one generation."""

    totals: InstallationTotals
    generation: str
    tools: tuple[ToolMetadata, ...]


@dataclass(frozen=True, slots=True)
class MetadataPart:
    """One received event part: the header every part repeats and this part's slice of tools."""

    team_id: str
    totals: InstallationTotals
    generation: str
    part: int
    parts: int
    tools: tuple[Mapping[str, Any], ...]


class MetadataSink(Protocol):
    """Where the batcher stores event parts (``satellite.aws.metadata_store.DynamoMetadataStore``)."""

    def store_part(self, part: MetadataPart) -> Outcome:
        """Stage one part; make its generation current once every part is staged, unless a newer one is.

        Raises:
            InvalidMetadataEvent: the staged parts of the generation disagree with its header.
            StoreError: the store failed.
        """
        ...


def iso_utc(moment: datetime) -> str:
    """Fixed-width ISO-8601 in UTC (naive means UTC), so stored timestamps compare correctly as strings."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def listed_entry(slug: str, definition: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as ``tools/list`` would list it if the gateway exposed it directly: namespaced ``slug:tool``."""
    return {**definition, "name": f"{slug}:{definition['name']}"}


def build_events(
    installation: Installation, discovered: DiscoveredCatalog, *, part_bytes: int = PART_BYTES
) -> list[dict[str, Any]]:
    """The ``mcp.tools.discovered`` details of one discovery: one when it fits ``part_bytes``, else parts.

    Raises:
        ValueError: ``part_bytes`` cannot hold even the header, or the catalog needs more than 9,999 parts.
    """
    tools = [_tool_entry(tool, part_bytes) for tool in discovered.tools]
    listed = [listed_entry(installation.slug, tool.definition) for tool in discovered.tools]
    header: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "installation_id": installation.installation_id,
        "installation_name": installation.name or installation.slug,
        "team_id": installation.team_id,
        "server_slug": installation.slug,
        "config_hash": discovered.config_hash,
        "discovered_at": iso_utc(discovered.discovered_at),
        "tool_count": len(tools),
        "total_tokens": sum(entry["token_count"] for entry in tools),
        "total_tokens_o200k": sum(tool_tokens(tool.definition, SECOND_ENCODING) for tool in discovered.tools),
        "listed_tokens": _listed_tokens(listed, ENCODING),
        "listed_tokens_o200k": _listed_tokens(listed, SECOND_ENCODING),
        "encoding": ENCODING,
    }
    digest = hashlib.sha256(compact_json({"header": header, "tools": tools}).encode("utf-8")).hexdigest()
    header["generation"] = digest[:32]
    slices = _slices(header, tools, part_bytes)
    return [{**header, "part": index, "parts": len(slices), "tools": chunk} for index, chunk in enumerate(slices)]


def encode_detail(detail: Mapping[str, Any]) -> str:
    """The ``Detail`` string of a PutEvents entry: compact JSON."""
    return compact_json(detail)


def entry_size(detail: Mapping[str, Any]) -> int:
    """Bytes EventBridge counts for a PutEvents entry with this detail (no Time, no Resources)."""
    return len(SOURCE.encode()) + len(DETAIL_TYPE.encode()) + len(encode_detail(detail).encode("utf-8"))


def parse_event(body: str | Mapping[str, Any]) -> MetadataPart:
    """Read one part from an EventBridge event (as an SQS message body delivers it) or from its bare detail.

    Raises:
        InvalidMetadataEvent: the body is not JSON, not an ``mcp.tools.discovered`` event, or a field is
            missing or has the wrong type.
    """
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError as exc:
            raise InvalidMetadataEvent("body", f"is not JSON: {exc}") from exc
    if not isinstance(body, Mapping):
        raise InvalidMetadataEvent("body", "is not a JSON object")
    if "detail" in body:
        if body.get("detail-type") != DETAIL_TYPE:
            raise InvalidMetadataEvent("detail-type", f"{body.get('detail-type')!r} is not {DETAIL_TYPE!r}")
        detail = body["detail"]
    else:
        detail = body
    if not isinstance(detail, Mapping):
        raise InvalidMetadataEvent("detail", "is not a JSON object")
    if detail.get("schema_version") != SCHEMA_VERSION:
        raise InvalidMetadataEvent("schema_version", f"{detail.get('schema_version')!r} is not {SCHEMA_VERSION}")
    text = {name: _text(detail, name) for name in ("installation_id", "team_id", "server_slug", "generation")}
    numbers = {
        name: _count(detail, name)
        for name in (
            "tool_count",
            "total_tokens",
            "total_tokens_o200k",
            "listed_tokens",
            "listed_tokens_o200k",
            "part",
            "parts",
        )
    }
    if not numbers["part"] < numbers["parts"] <= _MAX_PARTS:
        raise InvalidMetadataEvent("part", f"part {numbers['part']} of {numbers['parts']} is out of range")
    if not text["generation"].isalnum():
        raise InvalidMetadataEvent("generation", "must be alphanumeric")
    raw_discovered = _text(detail, "discovered_at")
    try:
        discovered_at = iso_utc(datetime.fromisoformat(raw_discovered))
    except ValueError as exc:
        raise InvalidMetadataEvent("discovered_at", f"{raw_discovered!r} is not an ISO-8601 timestamp") from exc
    tools = detail.get("tools")
    if not isinstance(tools, list):
        raise InvalidMetadataEvent("tools", "is not a list")
    for index, tool in enumerate(tools):
        _tool_metadata(tool, f"tools[{index}]")
    totals = InstallationTotals(
        installation_id=text["installation_id"],
        installation_name=str(detail.get("installation_name") or text["server_slug"]),
        server_slug=text["server_slug"],
        config_hash=str(detail.get("config_hash") or ""),
        discovered_at=discovered_at,
        tool_count=numbers["tool_count"],
        total_tokens=numbers["total_tokens"],
        total_tokens_o200k=numbers["total_tokens_o200k"],
        listed_tokens=numbers["listed_tokens"],
        listed_tokens_o200k=numbers["listed_tokens_o200k"],
    )
    return MetadataPart(
        team_id=text["team_id"],
        totals=totals,
        generation=text["generation"],
        part=numbers["part"],
        parts=numbers["parts"],
        tools=tuple(tools),
    )


def tools_of_parts(totals: InstallationTotals, slices: Sequence[Sequence[Mapping[str, Any]]]) -> list[ToolMetadata]:
    """Every tool of a generation, from its parts' slices in part order.

    Raises:
        InvalidMetadataEvent: the slices hold another number of tools than the header's ``tool_count``,
            or a tool entry is malformed.
    """
    tools = [
        _tool_metadata(tool, f"part {index} tools[{position}]")
        for index, chunk in enumerate(slices)
        for position, tool in enumerate(chunk)
    ]
    if len(tools) != totals.tool_count:
        raise InvalidMetadataEvent(
            "tool_count", f"the parts hold {len(tools)} tools, the header says {totals.tool_count}"
        )
    return tools


def ingest(sink: MetadataSink, body: str | Mapping[str, Any]) -> Outcome:
    """Store one ``mcp.tools.discovered`` event part: the batcher's work for one SQS record.

    Raises:
        InvalidMetadataEvent: the event is malformed (retrying will not help; it ends in the DLQ).
        StoreError: the store failed (the record is retried).
    """
    part = parse_event(body)
    outcome = sink.store_part(part)
    logger.info(
        "metadata event part ingested",
        extra={
            "operation": "ingest_metadata",
            "team_id": part.team_id,
            "installation_id": part.totals.installation_id,
            "generation": part.generation,
            "part": part.part,
            "parts": part.parts,
            "outcome": outcome.value,
        },
    )
    return outcome


@cache
def meta_tools_tokens(encoding_name: str = ENCODING) -> int:
    """Tokens of the ``tools/list`` result a client receives from the gateway: the four meta-tools."""
    # Imported here: it pulls in the mcp SDK (about 0.6 s), which the batcher never needs.
    import mcp_types as types

    from satellite.mcp_server import META_TOOLS

    listed = types.ListToolsResult(tools=list(META_TOOLS)).model_dump(by_alias=True, mode="json", exclude_none=True)
    return count_tokens(compact_json(listed), encoding_name)


def token_savings(team_id: str, installations: Sequence[InstallationTotals]) -> dict[str, Any]:
    """A team's token savings: its tools exposed directly versus the four meta-tools.

    ``direct_tokens`` is the token count of the ``tools/list`` result ``{"tools": [...]}`` a client would receive
    with every tool of every installation listed directly (namespaced ``slug:tool``): the installations'
    ``listed_tokens`` plus the envelope and one separator between installations: counting the whole JSON at once
    differs by at most a token at each seam (the envelope's two ends and between installations), so totals stay
    additive and no team-wide tokenization is needed. ``meta_tools_tokens`` counts the gateway's real
    ``tools/list`` result the same way. ``tool_tokens`` is seed 000's per-tool formula summed, for comparison.
    """
    result: dict[str, Any] = {
        "team_id": team_id,
        "encoding": ENCODING,
        "installations": len(installations),
        "tools": sum(i.tool_count for i in installations),
        "tool_tokens": sum(i.total_tokens for i in installations),
    }
    for suffix, encoding_name, listed in (
        ("", ENCODING, [i.listed_tokens for i in installations]),
        ("_o200k", SECOND_ENCODING, [i.listed_tokens_o200k for i in installations]),
    ):
        direct = _direct_tokens(listed, encoding_name)
        meta = meta_tools_tokens(encoding_name)
        result[f"direct_tokens{suffix}"] = direct
        result[f"meta_tools_tokens{suffix}"] = meta
        result[f"saved_tokens{suffix}"] = max(direct - meta, 0)
        result[f"reduction_percent{suffix}"] = round(100 * (1 - meta / direct), 2) if direct > meta else 0.0
    return result


def _direct_tokens(listed: Sequence[int], encoding_name: str) -> int:
    if not listed:
        return 0
    return (
        count_tokens('{"tools":[]}', encoding_name) + sum(listed) + (len(listed) - 1) * count_tokens(",", encoding_name)
    )


def _listed_tokens(listed: Sequence[Mapping[str, Any]], encoding_name: str) -> int:
    return count_tokens(",".join(compact_json(entry) for entry in listed), encoding_name) if listed else 0


def _tool_entry(tool: CachedTool, part_bytes: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "tool_name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "token_count": tool_tokens(tool.definition, ENCODING),
    }
    # Half the budget: the header and the JSON framing must fit beside the tool in its own part.
    if len(compact_json(entry).encode("utf-8")) > part_bytes // 2:
        logger.warning(
            "tool too large for an event; its description and schema are left out of the metadata",
            extra={"operation": "build_events", "tool": tool.name},
        )
        entry = {"tool_name": tool.name, "token_count": entry["token_count"], "omitted": list(OMITTED)}
    return entry


def _slices(header: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], part_bytes: int) -> list[list[Any]]:
    framing = entry_size({**header, "part": _MAX_PARTS, "parts": _MAX_PARTS, "tools": []})
    if framing >= part_bytes // 2:
        raise ValueError(f"part_bytes={part_bytes} cannot hold an event header of {framing} bytes")
    slices: list[list[Any]] = [[]]
    used = framing
    for tool in tools:
        size = len(compact_json(tool).encode("utf-8")) + 1  # the comma before it
        if slices[-1] and used + size > part_bytes:
            slices.append([])
            used = framing
        slices[-1].append(tool)
        used += size
    if len(slices) > _MAX_PARTS:
        raise ValueError(f"the catalog needs {len(slices)} event parts; at most {_MAX_PARTS} are supported")
    return slices


def _tool_metadata(tool: Any, where: str) -> ToolMetadata:
    if not isinstance(tool, Mapping):
        raise InvalidMetadataEvent(where, "is not a JSON object")
    name, tokens = tool.get("tool_name"), tool.get("token_count")
    if not isinstance(name, str) or not name:
        raise InvalidMetadataEvent(f"{where}.tool_name", "must be a non-empty string")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise InvalidMetadataEvent(f"{where}.token_count", "must be a non-negative integer")
    omitted = tool.get("omitted") or []
    description = tool.get("description", "")
    schema = tool.get("input_schema", {})
    if not isinstance(description, str) or not isinstance(schema, Mapping) or not isinstance(omitted, list):
        raise InvalidMetadataEvent(where, "description must be a string, input_schema an object, omitted a list")
    return ToolMetadata(name, description, schema, tokens, tuple(str(field) for field in omitted))


def _text(detail: Mapping[str, Any], name: str) -> str:
    value = detail.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidMetadataEvent(name, "must be a non-empty string")
    return value


def _count(detail: Mapping[str, Any], name: str) -> int:
    value = detail.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidMetadataEvent(name, "must be a non-negative integer")
    return value
