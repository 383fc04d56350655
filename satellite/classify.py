"""Classifying discovery failures: what state, status and one-line suggestion each failure gets. Pure.

=======================  ===========  =================  =======  ==============================================
failure kind             discovery    error class        status   why
=======================  ===========  =================  =======  ==============================================
unreachable              failed       retry later        offline  servers restart and networks heal by themselves
timeout                  timeout      retry later        offline  a slow or overloaded server may answer next time
auth                     failed       needs user action  error    a rejected or missing token never fixes itself
protocol                 failed       needs user action  error    see below
invalid_configuration    failed       needs user action  error    the installation itself must change
command_not_found        failed       needs user action  error    stdio: the command must be installed or fixed
permission_denied        failed       needs user action  error    stdio: the file mode or the command must change
=======================  ===========  =================  =======  ==============================================

Protocol failures count as needing user action: their usual causes (a URL that is not the MCP endpoint, the
wrong transport, a non-MCP service answering) do not heal by themselves. The schedule still retries every
installation that is offline or in error, so a server that was only briefly broken recovers without anyone
acting. An unknown kind is treated as retry later.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from satellite.catalog import DiscoveryState, ErrorClass, InstallationStatus, Status
from satellite.errors import FailureKind, InvalidInstallation, UpstreamError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

__all__ = ["KNOWN_LAUNCHERS", "Classification", "DiscoveryFailureKind", "classify", "failure_kind_of"]

# Commands people usually launch stdio servers with; a mistyped one gets a "did you mean".
KNOWN_LAUNCHERS = ("npx", "uvx", "node", "python", "python3", "uv", "docker", "deno", "bunx", "pipx")
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class DiscoveryFailureKind(StrEnum):
    """Every kind a discovery failure can have: the upstream kinds of ``FailureKind`` plus configuration and stdio."""

    UNREACHABLE = FailureKind.UNREACHABLE.value
    TIMEOUT = FailureKind.TIMEOUT.value
    AUTH = FailureKind.AUTH.value
    PROTOCOL = FailureKind.PROTOCOL.value
    INVALID_CONFIGURATION = "invalid_configuration"
    COMMAND_NOT_FOUND = "command_not_found"
    PERMISSION_DENIED = "permission_denied"


@dataclass(frozen=True, slots=True)
class Classification:
    """How one failure is recorded: the discovery state, the served status, the error class and a suggestion."""

    kind: DiscoveryFailureKind
    discovery: DiscoveryState
    status: Status
    error_class: ErrorClass
    suggestion: str

    def to_status(self, changed_at: datetime, message: str) -> InstallationStatus:
        """The installation status recording this failure at ``changed_at`` with the error ``message``."""
        return InstallationStatus(
            status=self.status,
            changed_at=changed_at,
            last_error=message,
            failure_kind=self.kind.value,
            discovery=self.discovery,
            error_class=self.error_class,
            suggestion=self.suggestion,
        )


def classify(
    kind: str, message: str = "", *, command: str | None = None, known_commands: Iterable[str] = KNOWN_LAUNCHERS
) -> Classification:
    """Classify one discovery failure of ``kind`` (a ``DiscoveryFailureKind`` value or an unknown string).

    ``message`` is the failure's message (a missing ``${VAR}`` is named in the suggestion); ``command`` is the
    stdio command that failed to start, compared against ``known_commands`` for a "did you mean".
    """
    try:
        failure = DiscoveryFailureKind(kind)
    except ValueError:
        return Classification(
            DiscoveryFailureKind.PROTOCOL,
            DiscoveryState.FAILED,
            Status.OFFLINE,
            ErrorClass.RETRY_LATER,
            "discovery failed for an unrecognised reason: it is retried later; see the error for details",
        )
    if failure is DiscoveryFailureKind.UNREACHABLE:
        return _retry(
            failure, DiscoveryState.FAILED, "server unreachable: retried later; check the URL and that the server runs"
        )
    if failure is DiscoveryFailureKind.TIMEOUT:
        return _retry(
            failure,
            DiscoveryState.TIMEOUT,
            "server did not answer in time: retried later; raise the installation's timeout_seconds if it is slow",
        )
    return _user_action(failure, _suggestion(failure, message, command, tuple(known_commands)))


def failure_kind_of(exc: BaseException) -> DiscoveryFailureKind | None:
    """The failure kind an exception raised while discovering stands for, or ``None`` when it is not one.

    Upstream errors keep their kind; an invalid installation is ``invalid_configuration``; starting a
    stdio command that does not exist or may not run is ``command_not_found`` or ``permission_denied``.
    """
    if isinstance(exc, UpstreamError):
        return DiscoveryFailureKind(exc.kind.value)
    if isinstance(exc, InvalidInstallation):
        return DiscoveryFailureKind.INVALID_CONFIGURATION
    if isinstance(exc, FileNotFoundError):
        return DiscoveryFailureKind.COMMAND_NOT_FOUND
    if isinstance(exc, PermissionError):
        return DiscoveryFailureKind.PERMISSION_DENIED
    if isinstance(exc, TimeoutError):
        return DiscoveryFailureKind.TIMEOUT
    return None


def _retry(kind: DiscoveryFailureKind, discovery: DiscoveryState, suggestion: str) -> Classification:
    return Classification(kind, discovery, Status.OFFLINE, ErrorClass.RETRY_LATER, suggestion)


def _user_action(kind: DiscoveryFailureKind, suggestion: str) -> Classification:
    return Classification(kind, DiscoveryState.FAILED, Status.ERROR, ErrorClass.NEEDS_USER_ACTION, suggestion)


def _suggestion(kind: DiscoveryFailureKind, message: str, command: str | None, known: tuple[str, ...]) -> str:
    if kind is DiscoveryFailureKind.AUTH:
        missing = _PLACEHOLDER.search(message) if "not set" in message else None
        if missing:
            return (
                f"authentication failed: ${{{missing[1]}}} is not set; define {missing[1]} in the gateway's environment"
            )
        return "authentication failed: check the token/headers (e.g. the Authorization header)"
    if kind is DiscoveryFailureKind.PROTOCOL:
        return "the server does not speak MCP as expected: check that the URL is its MCP endpoint and the transport"
    if kind is DiscoveryFailureKind.INVALID_CONFIGURATION:
        return "invalid configuration: fix the installation's fields named in the error"
    quoted = f"command '{command}'" if command else "the command"
    if kind is DiscoveryFailureKind.COMMAND_NOT_FOUND:
        close = difflib.get_close_matches(command, known, n=1, cutoff=0.6) if command else []
        hint = f"; did you mean '{close[0]}'?" if close and close[0] != command else ""
        return f"{quoted} not found: install it or fix the command{hint}"
    return f"permission denied running {quoted}: make it executable (chmod +x) or run it through its interpreter"
