"""One exception hierarchy for the gateway.

Adapters translate third-party errors into these with ``raise ... from exc``; the MCP and HTTP
edges turn them into JSON-RPC errors, ``isError`` results or 4xx responses in one place each.

::

    SatelliteError
    ├── InvalidInstallation        bad slug, transport, url or command; carries the field name
    │   └── DuplicateSlug          another installation of the team already uses the slug
    ├── NotFound
    │   ├── UnknownTool            no such ``slug:tool`` (carries close matches)
    │   └── UnknownResource        no such ``slug|uri`` (carries close matches)
    ├── Unavailable                the installation is offline, disabled or in error
    ├── UpstreamError              talking to an upstream MCP server failed
    │   └── (classified by ``FailureKind``: unreachable, timeout, auth, protocol)
    ├── StoreError                 the catalog store failed
    │   └── ConflictError          a conditional write lost a race
    └── AuthenticationError        the request carries no valid identity
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AuthenticationError",
    "ConflictError",
    "DuplicateSlug",
    "FailureKind",
    "InvalidInstallation",
    "NotFound",
    "SatelliteError",
    "StoreError",
    "Unavailable",
    "UnknownResource",
    "UnknownTool",
    "UpstreamError",
]


class SatelliteError(Exception):
    """Base of every error this package raises on purpose."""


class InvalidInstallation(SatelliteError):
    """An installation's configuration is invalid; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class DuplicateSlug(InvalidInstallation):
    """Another installation in the same team and owner scope already uses this slug."""

    def __init__(self, slug: str) -> None:
        super().__init__("slug", f"the team already has an installation with slug {slug!r}; choose another slug")
        self.slug = slug


class NotFound(SatelliteError):
    """Something addressed by name does not exist for this team."""

    def __init__(self, message: str, suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.suggestions = suggestions


class UnknownTool(NotFound):
    """No tool answers to the given ``slug:tool`` path."""


class UnknownResource(NotFound):
    """No resource answers to the given ``slug|uri``."""


class Unavailable(SatelliteError):
    """The installation exists but cannot serve calls right now (offline, disabled, error)."""


class FailureKind(StrEnum):
    """Why talking to an upstream failed; drives the status and the message the user sees."""

    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    AUTH = "auth"
    PROTOCOL = "protocol"


class UpstreamError(SatelliteError):
    """Talking to an upstream MCP server failed, classified by ``kind``."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class StoreError(SatelliteError):
    """The catalog store failed."""


class ConflictError(StoreError):
    """A conditional write lost against a concurrent or newer write."""


class AuthenticationError(SatelliteError):
    """The request carries no valid identity."""
