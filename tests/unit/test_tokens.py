from __future__ import annotations

import socket

import pytest

from satellite import tokens


def test_encodings_load_from_shipped_files_with_networking_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no network at all
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError("networking is disabled in this test")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    tokens.encoding.cache_clear()
    # When both encodings are built and used
    cl100k = tokens.encoding("cl100k_base")
    o200k = tokens.encoding("o200k_base")
    # Then they tokenize like tiktoken's published encodings
    assert cl100k.encode("hello world") == [15339, 1917]
    assert len(o200k.encode("hello world")) == 2
    assert cl100k.n_vocab == 100277


def test_tool_tokens_follow_the_documented_formula() -> None:
    tool = {"name": "echo", "description": "Echoes back the input", "inputSchema": {"type": "object"}}
    expected = sum(tokens.count_tokens(p) for p in ("echo", "Echoes back the input", '{"type":"object"}'))
    assert tokens.tool_tokens(tool) == expected
    assert tokens.tools_tokens([tool, tool]) == 2 * expected


def test_unknown_encodings_are_refused() -> None:
    with pytest.raises(ValueError, match="not shipped"):
        tokens.encoding("p50k_base")
