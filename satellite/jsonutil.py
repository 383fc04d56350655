"""Compact JSON, as stored, published and token-counted everywhere in the gateway. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["compact_json"]


def compact_json(value: Any) -> str:
    """``value`` as JSON without spaces, keeping non-ASCII text as is; read-only mappings become objects."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    # Definitions are read-only Mappings (e.g. MappingProxyType), which json does not serialise by itself.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
