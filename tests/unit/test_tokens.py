from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from satellite import tokens

if TYPE_CHECKING:
    from pathlib import Path


NO_NETWORK = """
import socket

def refuse(*args, **kwargs):
    raise OSError("networking is disabled in this process")

socket.socket = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse

from satellite import tokens

cl100k = tokens.encoding("cl100k_base")
o200k = tokens.encoding("o200k_base")
print(cl100k.encode("hello world"), len(o200k.encode("hello world")), cl100k.n_vocab)
"""


def test_encodings_load_from_shipped_files_with_networking_disabled(tmp_path: Path) -> None:
    # Given a fresh interpreter with no network at all and an empty tiktoken cache
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path)}
    # When both encodings are built and used
    completed = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    # Then they tokenize like tiktoken's published encodings, and nothing was cached from a download
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["[15339,", "1917]", "2", "100277"]
    assert list(tmp_path.iterdir()) == []


def test_tool_tokens_follow_the_documented_formula() -> None:
    tool = {"name": "echo", "description": "Echoes back the input", "inputSchema": {"type": "object"}}
    expected = sum(tokens.count_tokens(p) for p in ("echo", "Echoes back the input", '{"type":"object"}'))
    assert tokens.tool_tokens(tool) == expected
    assert tokens.tools_tokens([tool, tool]) == 2 * expected


def test_unknown_encodings_are_refused() -> None:
    with pytest.raises(ValueError, match="not shipped"):
        tokens.encoding("p50k_base")
