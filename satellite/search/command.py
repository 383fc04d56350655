"""``satellite search``: rank a catalog file's tools for a file of queries, one JSON line per query."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from satellite.search.index import SearchDocument, SearchIndex

if TYPE_CHECKING:
    from pathlib import Path
    from typing import TextIO


def _json_lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def run(catalog: Path, queries: Path, limit: int, out: TextIO) -> None:
    """Search every query of ``queries`` in the tools of ``catalog`` and write the ranked paths to ``out``.

    Args:
        catalog: JSON-lines file of tools, ``{"server", "name", "description", "inputSchema"}`` per line.
        queries: JSON-lines file with a ``"q"`` string per line (other keys are ignored).
        limit: How many paths to return per query.
        out: Receives one line ``{"q": ..., "results": ["server:tool", ...]}`` per query, in input order.

    Raises:
        ModelNotBuiltError: If the static embedding table has not been built.
    """
    index = SearchIndex.build([SearchDocument.from_definition(str(t["server"]), t) for t in _json_lines(catalog)])
    for query in _json_lines(queries):
        text = str(query["q"])
        results = [hit.path for hit in index.search(text, limit)]
        out.write(json.dumps({"q": text, "results": results}) + "\n")
