"""Compact argument signatures such as ``create_issue(repo: string, title: string, body?: string)``. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["render_signature"]


def render_signature(name: str, input_schema: Mapping[str, Any]) -> str:
    """Render a tool's call signature from its JSON Schema: required parameters first, optional ones marked ``?``."""
    properties = input_schema.get("properties")
    if not isinstance(properties, dict):
        return f"{name}()"
    required = input_schema.get("required")
    required_names = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    ordered = sorted(properties, key=lambda p: p not in required_names)
    params = [f"{p}{'' if p in required_names else '?'}: {_type_of(properties[p])}" for p in ordered]
    return f"{name}({', '.join(params)})"


def _type_of(schema: object) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list) and 0 < len(schema["enum"]) <= 4:
        return " | ".join(repr(v) if isinstance(v, str) else str(v) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        return f"{_type_of(schema.get('items'))}[]"
    if isinstance(kind, str):
        return kind
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            return " | ".join(_type_of(o) for o in options)
    return "any"
