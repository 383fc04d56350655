"""The process manager against real stdio servers (server-everything, server-memory) and the catalog on moto."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from satellite.catalog import Status
from satellite.errors import Unavailable, UpstreamError
from satellite.installation import Installation, Transport
from satellite.stdio.process import ServerState, StdioProcessManager, process_group_alive
from tests.integration.stdio.conftest import (
    EVERYTHING_TOOLS,
    entry_of,
    everything,
    installed,
    wait_until,
    worker_settings,
)

if TYPE_CHECKING:
    from pathlib import Path

    from satellite.aws.catalog_store import DynamoCatalogStore

pytestmark = pytest.mark.anyio

FAST_BACKOFF = (0.05, 0.05, 0.05)


def text(result: dict[str, Any]) -> str:
    return "".join(str(part.get("text", "")) for part in result["content"])


async def test_first_spawn_discovers_and_records_the_catalog(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a stdio installation of server-everything that was never discovered
    entry = installed(store, everything(team_id))

    # When the worker is asked to discover it
    async with StdioProcessManager(worker_settings(tmp_path), store) as manager:
        discovered = await manager.discover(entry)
        info = manager.server(entry.installation.installation_id)

        # Then the server runs in its own process group and its catalog is stored, online
        assert info is not None and info.pid is not None and info.state is ServerState.RUNNING
        assert process_group_alive(info.pid)
        assert len(discovered.tools) == EVERYTHING_TOOLS
        stored = entry_of(store, entry.installation)
        assert len(stored.tools) == EVERYTHING_TOOLS
        assert len(stored.resources) > 0 and len(stored.templates) > 0
        assert stored.filled_by == "discovery:stdio"
        assert stored.status.status is Status.ONLINE
        assert info.requests_sent.get("tools/list") == 1
    # And leaving the manager stops the process group
    assert not process_group_alive(info.pid)


async def test_an_idle_server_stops_goes_dormant_and_respawns_without_listing_tools(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a server that answered one call and then idles past a one-second idle timeout
    entry = installed(store, everything(team_id))
    iid = entry.installation.installation_id
    async with StdioProcessManager(worker_settings(tmp_path, idle_timeout_seconds=1.0), store) as manager:
        first = await manager.call_tool(entry, "echo", {"message": "one"}, timeout=20)
        info = manager.server(iid)
        assert info is not None and info.pid is not None
        pid = info.pid

        # When it idles out
        await wait_until(lambda: manager.server(iid).state is ServerState.STOPPED, "server stopped")  # type: ignore[union-attr]

        # Then its whole process group is gone, it is dormant and its tools stay cached
        assert not process_group_alive(pid)
        stored = entry_of(store, entry.installation)
        assert stored.status.status is Status.DORMANT
        assert len(stored.tools) == EVERYTHING_TOOLS

        # And the next call respawns it without sending tools/list
        second = await manager.call_tool(stored, "echo", {"message": "two"}, timeout=20)
        again = manager.server(iid)
        assert again is not None and again.pid != pid and again.spawns == 2
        assert again.requests_sent.get("tools/list") == 1
        assert again.requests_sent.get("initialize") == 2
        assert "one" in text(first) and "two" in text(second)
        assert entry_of(store, entry.installation).status.status is Status.ONLINE


async def test_a_child_killed_mid_call_fails_the_call_clearly_and_is_restarted(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a long-running call in flight
    entry = installed(store, everything(team_id))
    iid = entry.installation.installation_id
    async with StdioProcessManager(worker_settings(tmp_path), store, backoff=FAST_BACKOFF) as manager:
        await manager.discover(entry)
        failures: list[BaseException] = []

        async def long_call() -> None:
            try:
                await manager.call_tool(
                    entry, "trigger-long-running-operation", {"duration": 10, "steps": 2}, timeout=20
                )
            except UpstreamError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(long_call)
            await wait_until(lambda: manager.server(iid).requests_sent.get("tools/call"), "call sent")  # type: ignore[union-attr]
            pid = manager.server(iid).pid  # type: ignore[union-attr]
            assert pid is not None

            # When the whole child process group is killed
            os.killpg(pid, signal.SIGKILL)

        # Then the caller gets a clear error saying the server crashed
        assert len(failures) == 1
        assert "crashed during tools/call" in str(failures[0])

        # And the restart policy brings it back under a new pid, serving calls again
        await wait_until(
            lambda: manager.server(iid).state is ServerState.RUNNING and manager.server(iid).pid != pid,  # type: ignore[union-attr]
            "server restarted",
        )
        info = manager.server(iid)
        assert info is not None and info.restarts == 1
        assert "ok" in text(await manager.call_tool(entry, "echo", {"message": "ok"}, timeout=20))


async def test_a_server_crashing_on_every_start_ends_in_error_and_fails_fast(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a server that exits with an error right after it starts
    crashing = Installation(
        installation_id=f"{team_id}-crash",
        team_id=team_id,
        slug="crash",
        transport=Transport.STDIO,
        command="node",
        args=("-e", "console.error('boom: missing config'); process.exit(1)"),
    )
    entry = installed(store, crashing)
    async with StdioProcessManager(worker_settings(tmp_path), store, backoff=FAST_BACKOFF) as manager:
        # When a call needs it
        with pytest.raises(Unavailable) as first:
            await manager.call_tool(entry, "echo", {}, timeout=20)

        # Then it was started once and restarted three times, then left in error with its stderr
        info = manager.server(crashing.installation_id)
        assert info is not None and info.state is ServerState.ERROR and info.spawns == 4
        assert "crashed 4 times" in str(first.value) and "boom: missing config" in str(first.value)
        status = entry_of(store, crashing).status
        assert status.status is Status.ERROR and status.failure_kind == "crashed"

        # And later calls fail fast with the same message, without spawning
        started = time.monotonic()
        with pytest.raises(Unavailable, match="crashed 4 times"):
            await manager.call_tool(entry, "echo", {}, timeout=20)
        assert time.monotonic() - started < 0.5
        assert manager.server(crashing.installation_id).spawns == 4  # type: ignore[union-attr]


async def test_a_command_that_does_not_exist_is_an_error_with_a_suggestion(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given an installation whose command is mistyped
    typo = Installation(
        installation_id=f"{team_id}-typo",
        team_id=team_id,
        slug="typo",
        transport=Transport.STDIO,
        command="uvxx",
        args=("mcp-server-time",),
    )
    entry = installed(store, typo)
    async with StdioProcessManager(worker_settings(tmp_path), store) as manager:
        # When it is discovered
        with pytest.raises(Unavailable) as refused:
            await manager.discover(entry)

    # Then the caller and the status say "command not found" with a suggestion
    assert "command not found" in str(refused.value) and "did you mean 'uvx'" in str(refused.value)
    status = entry_of(store, typo).status
    assert status.status is Status.ERROR
    assert status.failure_kind == "command_not_found"
    assert status.last_error is not None and "command not found" in status.last_error
    assert status.suggestion is not None and "did you mean 'uvx'?" in status.suggestion


async def test_the_child_sees_its_own_env_and_nothing_of_the_worker(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker whose environment holds AWS credentials and login variables
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
    monkeypatch.setenv("USER", "worker-user")
    monkeypatch.setenv("SHELL", "/bin/worker-shell")
    settings = worker_settings(
        tmp_path, environment={"PATH": os.environ["PATH"], "API_TOKEN": "t0ken", "AWS_SECRET_ACCESS_KEY": "x"}
    )
    # And an installation with its own variables, one of them a placeholder
    entry = installed(store, everything(team_id, env={"GREETING": "hello", "TOKEN": "${API_TOKEN}"}))

    # When the server prints its environment
    async with StdioProcessManager(settings, store) as manager:
        result = await manager.call_tool(entry, "get-env", {}, timeout=20)

    # Then it sees the minimal base plus its own variables, resolved, and nothing else
    environment = json.loads(text(result))
    assert environment["GREETING"] == "hello" and environment["TOKEN"] == "t0ken"
    assert environment["HOME"].startswith(str(tmp_path)) and environment["TMPDIR"].startswith(str(tmp_path))
    assert set(environment) <= {"PATH", "HOME", "TMPDIR", "LANG", "PWD", "GREETING", "TOKEN"}
    assert "AWS_SECRET_ACCESS_KEY" not in environment and "USER" not in environment


async def test_the_cap_stops_the_least_recently_used_idle_server_first(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a worker capped at one process, running one idle server
    first = installed(store, everything(team_id, slug="first"))
    second = installed(store, everything(team_id, slug="second"))
    async with StdioProcessManager(worker_settings(tmp_path, max_processes=1), store) as manager:
        await manager.call_tool(first, "echo", {"message": "a"}, timeout=20)
        pid = manager.server(first.installation.installation_id).pid  # type: ignore[union-attr]
        assert pid is not None

        # When another installation needs a process
        await manager.call_tool(second, "echo", {"message": "b"}, timeout=20)

        # Then the idle one was stopped (dormant, group gone) and only one process runs
        assert manager.server(first.installation.installation_id).state is ServerState.STOPPED  # type: ignore[union-attr]
        assert not process_group_alive(pid)
        assert manager.running_count() == 1
        assert entry_of(store, first.installation).status.status is Status.DORMANT


async def test_uninstall_stops_the_process_and_removes_its_folder(
    store: DynamoCatalogStore, team_id: str, tmp_path: Path
) -> None:
    # Given a running server
    entry = installed(store, everything(team_id))
    iid = entry.installation.installation_id
    async with StdioProcessManager(worker_settings(tmp_path), store) as manager:
        await manager.call_tool(entry, "echo", {"message": "a"}, timeout=20)
        pid = manager.server(iid).pid  # type: ignore[union-attr]
        assert pid is not None
        folders = list(tmp_path.glob(f"*/{iid}"))
        assert folders

        # When it is uninstalled
        stopped = await manager.stop(iid, uninstall=True)

        # Then its process group and folder are gone and the worker forgot it
        assert stopped and not process_group_alive(pid)
        assert not folders[0].exists()
        assert manager.server(iid) is None
