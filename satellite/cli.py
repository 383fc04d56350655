"""The ``satellite`` command: every command-line entry point of the project."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the ``satellite`` command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="satellite", description="Serverless MCP gateway (hierarchical router).")
    commands = parser.add_subparsers(dest="command", required=True)

    search = commands.add_parser("search", help="rank a catalog file with the gateway's search, one JSON line a query")
    search.add_argument("--catalog", type=Path, required=True, help='JSONL of {"server","name","description",...}')
    search.add_argument("--queries", type=Path, required=True, help='JSONL of {"q": ...}')
    search.add_argument("--limit", type=int, default=10)

    dev = commands.add_parser("dev", help="run the whole gateway locally with example upstream servers")
    dev.add_argument("--config", type=Path, default=Path("infra/local/servers.json"))
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)

    tokens = commands.add_parser("tokens", help="print a team's token savings, as served by a gateway's /api/tokens")
    tokens.add_argument("--url", default="http://127.0.0.1:8000", help="the gateway's base URL")
    tokens.add_argument("--token", help="bearer token (default: the local dev token)")

    args = parser.parse_args(argv)
    if args.command == "search":
        from satellite.search.command import run

        run(args.catalog, args.queries, args.limit, sys.stdout)
        return 0
    if args.command == "tokens":
        from satellite.local.stack import dev_token, print_token_savings

        return print_token_savings(args.url, args.token or dev_token())
    from satellite.local.stack import run_dev

    return run_dev(args.config, args.host, args.port)


if __name__ == "__main__":
    sys.exit(main())
