"""The ``satellite`` console script, as installed by the package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_search_prints_one_json_line_per_query_ranked_by_the_gateways_search(tmp_path: Path) -> None:
    # Given a catalog and queries in the bench format
    catalog = tmp_path / "tools.jsonl"
    tools = [
        {"server": "github", "name": "create_issue", "description": "Create a new issue", "inputSchema": {}},
        {"server": "github", "name": "list_commits", "description": "List commits of a branch", "inputSchema": {}},
        {"server": "time", "name": "get_current_time", "description": "Current time in a timezone", "inputSchema": {}},
    ]
    catalog.write_text("\n".join(json.dumps(t) for t in tools) + "\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"q": "open a github issue"}) + "\n" + json.dumps({"q": "what time is it"}) + "\n")
    executable = Path(sys.executable).parent / "satellite"
    # When the command runs
    completed = subprocess.run(
        [str(executable), "search", "--catalog", str(catalog), "--queries", str(queries), "--limit", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # Then each line is {"q", "results"} with server:tool paths, best first, at most --limit
    lines = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [line["q"] for line in lines] == ["open a github issue", "what time is it"]
    assert lines[0]["results"][0] == "github:create_issue"
    assert lines[1]["results"][0] == "time:get_current_time"
    assert all(len(line["results"]) <= 2 for line in lines)
