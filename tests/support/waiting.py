"""Bounded waits on a condition, for tests that observe background work (never a bare sleep)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["eventually"]

_T = TypeVar("_T")
_POLL_PACE = threading.Event()  # never set: only its bounded wait() paces the poll


def eventually(condition: Callable[[], _T], what: str, timeout: float = 20.0) -> _T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        _POLL_PACE.wait(0.05)
