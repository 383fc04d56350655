"""Building and reading ``mcp.tools.discovered`` events, token counts, the 256 KB decision, and token savings."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from satellite import metadata, tokens
from satellite.catalog import CachedTool, DiscoveredCatalog
from satellite.installation import Installation, Transport
from satellite.metadata import (
    DETAIL_TYPE,
    ENTRY_LIMIT_BYTES,
    PART_BYTES,
    InstallationTotals,
    InvalidMetadataEvent,
    build_events,
    entry_size,
    parse_event,
    token_savings,
    tools_of_parts,
)

DISCOVERED_AT = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)


def synthetic_tool(index: int, extra_description: str = "") -> dict[str, Any]:
    """A tool shaped like real servers' tools: a few typed arguments with descriptions, some non-ASCII text."""
    return {
        "name": f"tool_{index:04d}",
        "description": f"Opération n°{index} → reads, filters and summarises records of resource {index}. "
        f"Returns JSON with warnings 🚀.{extra_description}",
        "inputSchema": {
            "type": "object",
            "properties": {
                f"arg_{arg}": {"type": "string", "description": f"Argument {arg} of tool {index}, e.g. 'value-{arg}'"}
                for arg in range(6)
            },
            "required": ["arg_0"],
        },
    }


def synthetic_catalog(
    tool_count: int, *, discovered_at: datetime = DISCOVERED_AT, config_hash: str = "hash-1", seed: str = ""
) -> DiscoveredCatalog:
    """A discovery result with ``tool_count`` synthetic tools; ``seed`` varies descriptions between catalogs."""
    tools = tuple(
        CachedTool(definition=synthetic_tool(i, seed), discovered_at=discovered_at, transport=Transport.STDIO)
        for i in range(tool_count)
    )
    return DiscoveredCatalog(config_hash, Transport.STDIO, discovered_at, "discovery:stdio", tools=tools)


def installation(installation_id: str = "i-1", slug: str = "files", team_id: str = "t1") -> Installation:
    return Installation(installation_id, team_id, slug, Transport.STDIO, name=f"{slug}-server", command="node")


def direct_tool_tokens(tool: dict[str, Any], encoding_name: str = "cl100k_base") -> int:
    # The documented formula, computed with the tiktoken Encoding itself rather than through satellite.tokens.
    encoding = tokens.encoding(encoding_name)
    schema = json.dumps(tool["inputSchema"], separators=(",", ":"), ensure_ascii=False)
    return sum(len(encoding.encode(text)) for text in (tool["name"], tool["description"], schema))


def test_a_small_catalog_travels_as_one_event_with_the_seed_payload_and_exact_token_counts() -> None:
    # Given a discovery of three tools
    discovered = synthetic_catalog(3)

    # When its events are built
    [detail] = build_events(installation(), discovered)

    # Then one event carries seed 000's fields, with per-tool tokens equal to tiktoken's counts
    assert {
        "installation_id": "i-1",
        "installation_name": "files-server",
        "team_id": "t1",
        "server_slug": "files",
        "config_hash": "hash-1",
        "tool_count": 3,
        "part": 0,
        "parts": 1,
    }.items() <= detail.items()
    assert datetime.fromisoformat(detail["discovered_at"]) == DISCOVERED_AT
    definitions = [dict(t.definition) for t in discovered.tools]
    assert [t["tool_name"] for t in detail["tools"]] == [d["name"] for d in definitions]
    assert [t["description"] for t in detail["tools"]] == [d["description"] for d in definitions]
    assert [t["input_schema"] for t in detail["tools"]] == [d["inputSchema"] for d in definitions]
    assert [t["token_count"] for t in detail["tools"]] == [direct_tool_tokens(d) for d in definitions]
    assert detail["total_tokens"] == sum(direct_tool_tokens(d) for d in definitions)
    assert detail["total_tokens_o200k"] == sum(direct_tool_tokens(d, "o200k_base") for d in definitions)
    assert detail["total_tokens_o200k"] != detail["total_tokens"]
    assert entry_size(detail) < PART_BYTES


def test_events_are_deterministic_and_the_generation_names_the_catalog() -> None:
    # Given the same discovery twice, and one with another description
    first = build_events(installation(), synthetic_catalog(5))
    again = build_events(installation(), synthetic_catalog(5))
    changed = build_events(installation(), synthetic_catalog(5, seed=" Changed."))

    # Then the same discovery gives identical events (replays land on the same keys), a changed one another generation
    assert first == again
    assert changed[0]["generation"] != first[0]["generation"]


def test_a_1500_tool_catalog_is_split_into_self_describing_parts_under_the_entry_limit() -> None:
    # Given a 1,500-tool catalog whose single event would exceed EventBridge's 256 KB entry limit
    discovered = synthetic_catalog(1500)
    [whole] = build_events(installation(), discovered, part_bytes=10 * 1024 * 1024)
    assert entry_size(whole) > ENTRY_LIMIT_BYTES

    # When its events are built with the default budget
    details = build_events(installation(), discovered)

    # Then several parts each fit the budget (far under the limit), repeat the header and share one generation
    assert len(details) > 1
    assert all(entry_size(d) <= PART_BYTES < ENTRY_LIMIT_BYTES for d in details)
    assert [d["part"] for d in details] == list(range(len(details)))
    assert {d["parts"] for d in details} == {len(details)}
    header = {k: v for k, v in whole.items() if k not in ("tools", "part", "parts")}
    assert all({k: v for k, v in d.items() if k not in ("tools", "part", "parts")} == header for d in details)
    # And read back in order they hold every tool exactly once, with the totals of the whole catalog
    parts = [parse_event(json.dumps({"detail-type": DETAIL_TYPE, "detail": d})) for d in details]
    tools = tools_of_parts(parts[0].totals, [p.tools for p in parts])
    assert [t.tool_name for t in tools] == [t.name for t in discovered.tools]
    assert sum(t.token_count for t in tools) == parts[0].totals.total_tokens == whole["total_tokens"]


def test_a_tool_too_large_for_any_event_keeps_its_tokens_and_says_what_was_omitted() -> None:
    # Given a catalog with one tool whose description alone exceeds half an event's budget
    huge = CachedTool(
        definition=synthetic_tool(0, " x" * 60_000), discovered_at=DISCOVERED_AT, transport=Transport.STDIO
    )
    discovered = DiscoveredCatalog("h", Transport.STDIO, DISCOVERED_AT, "discovery:stdio", tools=(huge,))

    # When its events are built
    [detail] = build_events(installation(), discovered)

    # Then the tool is there with its exact token count, its description and schema explicitly omitted
    [tool] = detail["tools"]
    assert tool == {
        "tool_name": "tool_0000",
        "token_count": direct_tool_tokens(dict(huge.definition)),
        "omitted": ["description", "input_schema"],
    }
    [parsed] = tools_of_parts(parse_event(detail).totals, [parse_event(detail).tools])
    assert parsed.omitted == ("description", "input_schema")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("not json", "body"),
        (json.dumps({"detail-type": "Scheduled Event", "detail": {}}), "detail-type"),
        (json.dumps({"detail-type": DETAIL_TYPE, "detail": {"schema_version": 2}}), "schema_version"),
    ],
)
def test_malformed_bodies_are_refused_with_the_field(body: str, field: str) -> None:
    # Given a body that is not a valid event / When it is parsed / Then the offending field is named
    with pytest.raises(InvalidMetadataEvent) as caught:
        parse_event(body)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"team_id": ""}, "team_id"),
        ({"tool_count": -1}, "tool_count"),
        ({"part": 3}, "part"),
        ({"discovered_at": "yesterday"}, "discovered_at"),
        ({"generation": "../x"}, "generation"),
        ({"tools": [{"tool_name": "a", "token_count": "7"}]}, "tools[0].token_count"),
    ],
)
def test_invalid_detail_fields_are_refused(change: dict[str, Any], field: str) -> None:
    # Given a valid event with one field broken
    [detail] = build_events(installation(), synthetic_catalog(1))
    # When it is parsed / Then the field is named
    with pytest.raises(InvalidMetadataEvent) as caught:
        parse_event({**detail, **change})
    assert caught.value.field == field


def test_parts_disagreeing_with_their_header_are_refused() -> None:
    # Given a part whose header counts more tools than it carries
    [detail] = build_events(installation(), synthetic_catalog(2))
    part = parse_event({**detail, "tool_count": 3})
    # When its tools are assembled / Then the mismatch is reported
    with pytest.raises(InvalidMetadataEvent, match="2 tools"):
        tools_of_parts(part.totals, [part.tools])


def test_token_savings_count_the_direct_tools_list_against_the_four_meta_tools() -> None:
    # Given two installations' events
    installs = [
        (installation("i-1", "files"), synthetic_catalog(40)),
        (installation("i-2", "git"), synthetic_catalog(7)),
    ]
    totals = [parse_event(build_events(i, d)[0]).totals for i, d in installs]

    # When the team's savings are computed
    savings = token_savings("t1", totals)

    # Then "direct" matches counting the tools/list JSON a client would receive, up to a token at each boundary
    # (the envelope's two ends and between installations)
    listed = [metadata.listed_entry(i.slug, dict(t.definition)) for i, d in installs for t in d.tools]
    whole = json.dumps({"tools": listed}, separators=(",", ":"), ensure_ascii=False)
    for suffix, encoding_name in (("", "cl100k_base"), ("_o200k", "o200k_base")):
        exact = len(tokens.encoding(encoding_name).encode(whole))
        assert abs(savings[f"direct_tokens{suffix}"] - exact) <= len(installs) + 1
    # And the meta-tools side is the gateway's real tools/list, so the reduction follows
    assert savings["meta_tools_tokens"] == metadata.meta_tools_tokens()
    assert 0 < savings["meta_tools_tokens"] < savings["direct_tokens"]
    assert savings["saved_tokens"] == savings["direct_tokens"] - savings["meta_tools_tokens"]
    assert savings["reduction_percent"] == round(100 * (1 - savings["meta_tools_tokens"] / savings["direct_tokens"]), 2)
    assert (savings["installations"], savings["tools"]) == (2, 47)
    assert savings["tool_tokens"] == sum(t.total_tokens for t in totals)


def test_token_savings_of_a_team_without_metadata_are_zero() -> None:
    # Given no installations / When savings are computed / Then nothing is claimed
    savings = token_savings("t1", [])
    assert (savings["direct_tokens"], savings["saved_tokens"], savings["reduction_percent"]) == (0, 0, 0.0)


def test_discovered_at_is_normalised_to_fixed_width_utc() -> None:
    # Given an event whose timestamp carries another offset
    [detail] = build_events(installation(), synthetic_catalog(1))
    later = (DISCOVERED_AT + timedelta(hours=2)).astimezone(timezone(timedelta(hours=5))).isoformat()
    # When it is parsed / Then it compares as a string like every stored timestamp
    parsed: InstallationTotals = parse_event({**detail, "discovered_at": later}).totals
    assert parsed.discovered_at == "2026-11-22T12:30:00.000000+00:00"
