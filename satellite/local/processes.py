"""Local processes on loopback: free ports, bounded waits for a port to open, and stopping process groups."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time

__all__ = ["free_port", "stop_process_group", "wait_for_port"]

LOOPBACK = "127.0.0.1"
_POLL_PACE = threading.Event()  # never set: only its bounded wait() paces the poll


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def wait_for_port(
    port: int, timeout: float, process: subprocess.Popen[bytes] | None = None, host: str = LOOPBACK
) -> None:
    """Poll until ``host:port`` accepts connections.

    Raises:
        TimeoutError: nothing accepted within ``timeout`` seconds.
        RuntimeError: ``process`` exited before the port opened.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the process exited with code {process.returncode} before {host}:{port} opened")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout} s") from None
            # A refused connect returns at once: pace the poll instead of spinning a core.
            _POLL_PACE.wait(0.05)


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop a process started with ``start_new_session=True`` and all its children (SIGTERM, then SIGKILL)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)
