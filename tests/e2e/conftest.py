from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING

import pytest

from satellite.local.processes import free_port
from satellite.local.stack import LocalStack
from tests.support.upstreams import BASIC_APP_ENTRY, EVERYTHING_ENTRY, hanging_server

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def write_config(path: Path, hanging_url: str) -> Path:
    """A servers.json like the example, on free ports, plus a stopped, a hanging and a stdio server."""
    http_port, sse_port, app_port, dead_port = free_port(), free_port(), free_port(), free_port()
    config = {
        "team": "e2e",
        "mcpServers": {
            "everything": {
                "url": f"http://127.0.0.1:{http_port}/mcp",
                "start": {
                    "command": "node",
                    "args": [str(EVERYTHING_ENTRY), "streamableHttp"],
                    "env": {"PORT": str(http_port)},
                },
            },
            "everything-sse": {
                "transport": "sse",
                "url": f"http://127.0.0.1:{sse_port}/sse",
                "start": {"command": "node", "args": [str(EVERYTHING_ENTRY), "sse"], "env": {"PORT": str(sse_port)}},
            },
            "basic-app": {
                "url": f"http://127.0.0.1:{app_port}/mcp",
                "start": {"command": "node", "args": [str(BASIC_APP_ENTRY)], "env": {"PORT": str(app_port)}},
            },
            "stopped": {"url": f"http://127.0.0.1:{dead_port}/mcp"},
            "hanging": {"url": hanging_url, "timeout_seconds": 2},
            "later": {"command": "uvx", "args": ["mcp-server-time"]},
        },
    }
    target = path / "servers.json"
    target.write_text(json.dumps(config))
    return target


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with hanging_server() as hanging_url:
        config = write_config(tmp_path_factory.mktemp("stack"), hanging_url)
        with LocalStack(config, token=secrets.token_urlsafe(16)) as local:
            yield local


@pytest.fixture(scope="package")
def gateway_url(stack: LocalStack) -> Iterator[str]:
    with stack.serve() as url:
        yield url
