"""Sanitising what upstream servers list: tools, resources and resource templates. Pure, no I/O.

Entries are raw JSON objects (camelCase wire names) and keep every field the server sent; only the
fields named below are changed, and every change becomes a warning naming the entry. Nothing is
dropped or cut silently. Limits come from :class:`~satellite.config.DiscoveryLimits`.

Choices, and why they differ from the review draft (seed 003):

* **Names are never rewritten.** A renamed tool cannot be called: ``tools/call`` needs the exact
  name. A name outside the MCP rule (1-128 of ``[A-Za-z0-9_.-]``) is kept with a warning; ``:``
  is harmless because tool paths split on the *first* ``:`` (slugs have none). A name is skipped
  only when it cannot be used at all: not a string, empty, containing control characters (no
  caller can reproduce it reliably, and it could forge lines in a listing), or a duplicate (the
  second tool of that name is unreachable).
* **HTML: only active or hidden markup is removed.** Real descriptions talk *about* HTML
  (``a <select> element``, ``use <div style="page-break-before: always;"></div>``, ``headings
  (<h1>, <h2>)``) and use tag-like placeholders (``<owner>``, ``<examples>``); stripping every
  tag would change what the tool does. Descriptions are text for models and JSON clients, never
  rendered by the gateway, so what is removed is markup that hides or runs something: HTML
  comments, ``script``/``style``/``iframe``/``object``/``embed`` elements with their content,
  and tags carrying event handlers (``onerror=``) or ``javascript:`` URLs.
* **Control characters** (C0 except tab/newline/carriage return, DEL, C1, bidirectional
  overrides) are removed from descriptions.
* **Bounds are generous and reported**: descriptions longer than ``max_description_chars`` are
  cut; an ``inputSchema`` over ``max_schema_bytes`` is replaced by ``{"type": "object"}``; an
  oversized ``outputSchema`` is dropped (a placeholder would reject valid structured results);
  entries beyond ``max_tools`` are left out by name. ``max_tools`` also bounds resources and
  templates per server.
* **Repairable schemas are repaired**: a missing ``inputSchema`` or one without ``"type"`` (the
  GitLab reference server sends these) gets ``"type": "object"``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from satellite.config import DiscoveryLimits

__all__ = ["TOOL_NAME_PATTERN", "clean_text", "sanitise_resources", "sanitise_templates", "sanitise_tools"]

TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Names and addresses are single-line identifiers: newlines and tabs are control characters there too.
_IDENTIFIER_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Only complete comments and elements: an unclosed "<script>" is prose about HTML ("all <script> tags are removed").
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_ACTIVE_ELEMENT = re.compile(r"<(script|style|iframe|object|embed)\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_ACTIVE_TAG = re.compile(
    r"</?[a-zA-Z][\w:-]*\b[^<>]*?(?:\bon[a-z]+\s*=|javascript\s*:)[^<>]*>", re.IGNORECASE | re.DOTALL
)
_MINIMAL_SCHEMA: dict[str, Any] = {"type": "object"}


def clean_text(text: str) -> tuple[str, list[str]]:
    """Remove active or hidden HTML markup and control characters; return the text and what was removed."""
    removed: list[str] = []
    cleaned = _COMMENT.sub("", text)
    if cleaned != text:
        removed.append("HTML comments")
    without_elements = _ACTIVE_ELEMENT.sub("", cleaned)
    without_tags = _ACTIVE_TAG.sub("", without_elements)
    if without_tags != cleaned:
        removed.append("active HTML (scripts, event handlers)")
    result = _CONTROL.sub("", without_tags)
    if result != without_tags:
        removed.append("control characters")
    return result, removed


def sanitise_tools(raw_tools: Sequence[object], limits: DiscoveryLimits) -> tuple[list[dict[str, Any]], list[str]]:
    """Validate, repair and bound a server's ``tools/list`` entries.

    Returns the kept tool definitions (every field the server sent, repaired where needed) and one
    warning per violation, each naming the tool.
    """
    warnings: list[str] = []
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw_tools):
        if not isinstance(entry, dict):
            warnings.append(f"tool entry #{index} is not a JSON object ({type(entry).__name__}); skipped")
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            warnings.append(f"tool entry #{index} has no name; skipped (a tool without a name cannot be called)")
            continue
        if _IDENTIFIER_CONTROL.search(name):
            warnings.append(f"tool {name!r}: the name contains control characters; skipped (it cannot be called)")
            continue
        if name in seen:
            warnings.append(f"tool {name!r}: listed more than once; kept the first definition")
            continue
        seen.add(name)
        if not TOOL_NAME_PATTERN.fullmatch(name):
            warnings.append(
                f"tool {name!r}: the name breaks the MCP naming rule (1-128 of A-Z a-z 0-9 _ . -); "
                "kept unchanged because renaming would break calls"
            )
        tool = dict(entry)
        label = f"tool {name!r}"
        _sanitise_description(tool, label, limits, warnings)
        _sanitise_input_schema(tool, label, limits, warnings)
        _sanitise_output_schema(tool, label, limits, warnings)
        kept.append(tool)
    return _bound(kept, "tools", lambda tool: str(tool["name"]), limits, warnings), warnings


def sanitise_resources(
    raw_resources: Sequence[object], limits: DiscoveryLimits
) -> tuple[list[dict[str, Any]], list[str]]:
    """Validate, repair and bound a server's ``resources/list`` entries (``uri`` required, ``name`` repaired)."""
    return _sanitise_addressed(raw_resources, "uri", "resource", limits)


def sanitise_templates(
    raw_templates: Sequence[object], limits: DiscoveryLimits
) -> tuple[list[dict[str, Any]], list[str]]:
    """Validate, repair and bound ``resources/templates/list`` entries (``uriTemplate`` required)."""
    return _sanitise_addressed(raw_templates, "uriTemplate", "resource template", limits)


def _sanitise_addressed(
    raw_entries: Sequence[object], key: str, kind: str, limits: DiscoveryLimits
) -> tuple[list[dict[str, Any]], list[str]]:
    warnings: list[str] = []
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw_entries):
        if not isinstance(entry, dict):
            warnings.append(f"{kind} entry #{index} is not a JSON object ({type(entry).__name__}); skipped")
            continue
        address = entry.get(key)
        if not isinstance(address, str) or not address.strip():
            warnings.append(f"{kind} entry #{index} has no {key}; skipped (it cannot be read)")
            continue
        if _IDENTIFIER_CONTROL.search(address):
            warnings.append(f"{kind} {address!r}: the {key} contains control characters; skipped")
            continue
        if address in seen:
            warnings.append(f"{kind} {address!r}: listed more than once; kept the first definition")
            continue
        seen.add(address)
        item = dict(entry)
        label = f"{kind} {address!r}"
        name = item.get("name")
        if not isinstance(name, str) or not name:
            item["name"] = address
            warnings.append(f"{label}: has no name; named it after its {key}")
        _sanitise_description(item, label, limits, warnings)
        kept.append(item)
    plural = "resource templates" if key == "uriTemplate" else "resources"
    return _bound(kept, plural, lambda item: str(item[key]), limits, warnings), warnings


def _sanitise_description(item: dict[str, Any], label: str, limits: DiscoveryLimits, warnings: list[str]) -> None:
    description = item.get("description")
    if description is None:
        return
    if not isinstance(description, str):
        del item["description"]
        warnings.append(f"{label}: the description is not a string ({type(description).__name__}); removed it")
        return
    cleaned, removed = clean_text(description)
    if removed:
        warnings.append(f"{label}: removed {' and '.join(removed)} from the description")
    if len(cleaned) > limits.max_description_chars:
        warnings.append(
            f"{label}: the description has {len(cleaned)} characters; kept the first "
            f"{limits.max_description_chars} (limit SATELLITE_MAX_DESCRIPTION_CHARS)"
        )
        cleaned = cleaned[: limits.max_description_chars]
    item["description"] = cleaned


def _sanitise_input_schema(tool: dict[str, Any], label: str, limits: DiscoveryLimits, warnings: list[str]) -> None:
    schema = tool.get("inputSchema")
    if schema is None:
        tool["inputSchema"] = dict(_MINIMAL_SCHEMA)
        warnings.append(f'{label}: has no inputSchema; assumed {{"type": "object"}}')
        return
    if not isinstance(schema, dict):
        tool["inputSchema"] = dict(_MINIMAL_SCHEMA)
        kind = type(schema).__name__
        warnings.append(f'{label}: the inputSchema is a {kind}, not an object; replaced it with {{"type": "object"}}')
        return
    size = _json_size(schema)
    if size > limits.max_schema_bytes:
        tool["inputSchema"] = dict(_MINIMAL_SCHEMA)
        warnings.append(
            f"{label}: the inputSchema has {size} bytes, over the {limits.max_schema_bytes}-byte limit "
            '(SATELLITE_MAX_SCHEMA_BYTES); replaced it with {"type": "object"}, so arguments are not described'
        )
        return
    if "type" not in schema:
        tool["inputSchema"] = {"type": "object", **schema}
        warnings.append(f'{label}: the inputSchema has no "type"; added "type": "object"')
    elif schema["type"] != "object":
        warnings.append(f'{label}: the inputSchema has type {schema["type"]!r}, MCP expects "object"; kept it')


def _sanitise_output_schema(tool: dict[str, Any], label: str, limits: DiscoveryLimits, warnings: list[str]) -> None:
    schema = tool.get("outputSchema")
    if schema is None:
        return
    if not isinstance(schema, dict):
        del tool["outputSchema"]
        warnings.append(f"{label}: the outputSchema is not a JSON object; removed it")
        return
    size = _json_size(schema)
    if size > limits.max_schema_bytes:
        del tool["outputSchema"]
        warnings.append(
            f"{label}: the outputSchema has {size} bytes, over the {limits.max_schema_bytes}-byte limit "
            "(SATELLITE_MAX_SCHEMA_BYTES); removed it"
        )


def _bound(
    items: list[dict[str, Any]],
    plural: str,
    name_of: Callable[[dict[str, Any]], str],
    limits: DiscoveryLimits,
    warnings: list[str],
) -> list[dict[str, Any]]:
    if len(items) <= limits.max_tools:
        return items
    left_out = [name_of(item) for item in items[limits.max_tools :]]
    warnings.append(
        f"the server lists {len(items)} {plural}; kept the first {limits.max_tools} (limit SATELLITE_MAX_TOOLS); "
        f"left out: {', '.join(left_out)}"
    )
    return items[: limits.max_tools]


def _json_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
