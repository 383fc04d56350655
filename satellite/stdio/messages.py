"""The worker request/reply message schema (version 1). Pure.

A request travels on the worker request queue; its reply travels on the reply queue the request
names, carrying the request's id as the correlation id. Both are JSON objects:

Request::

    {"version": 1, "request_id": "<uuid>", "kind": "call_tool" | "read_resource" | "discover" | "stop",
     "team_id": "...", "installation_id": "...", "config_hash": "...",
     "params": {...},                     # call_tool: {"name", "arguments"}; read_resource: {"uri"}
     "reply_to": "<reply queue URL>" | null,   # null for fire-and-forget kinds (discover, stop)
     "deadline": "<ISO 8601 UTC>"}        # past it the worker does not execute the request

Reply::

    {"version": 1, "correlation_id": "<request_id>", "ok": true,  "result": {...raw MCP result...}}
    {"version": 1, "correlation_id": "<request_id>", "ok": false, "error": {"kind": "...", "message": "..."}}

Error kinds: ``expired`` (deadline passed before execution), ``duplicate`` (the request id was
already claimed and no outcome is recorded), ``unavailable`` (the server is in error or cannot
start), ``upstream`` (the server failed mid-call), ``invalid`` (a malformed request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from satellite.errors import InvalidInstallation

__all__ = ["SCHEMA_VERSION", "Reply", "ReplyError", "Request", "RequestKind"]

SCHEMA_VERSION = 1


class RequestKind(StrEnum):
    CALL_TOOL = "call_tool"
    READ_RESOURCE = "read_resource"
    DISCOVER = "discover"
    STOP = "stop"


class ReplyError(StrEnum):
    EXPIRED = "expired"
    DUPLICATE = "duplicate"
    UNAVAILABLE = "unavailable"
    UPSTREAM = "upstream"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Request:
    """One request to a worker about one stdio installation."""

    request_id: str
    kind: RequestKind
    team_id: str
    installation_id: str
    config_hash: str
    deadline: datetime
    params: dict[str, Any] = field(default_factory=dict)
    reply_to: str | None = None

    def expired(self, now: datetime) -> bool:
        return now >= self.deadline

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": SCHEMA_VERSION,
                "request_id": self.request_id,
                "kind": str(self.kind),
                "team_id": self.team_id,
                "installation_id": self.installation_id,
                "config_hash": self.config_hash,
                "params": self.params,
                "reply_to": self.reply_to,
                "deadline": self.deadline.astimezone(UTC).isoformat(),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, body: str) -> Request:
        """Parse a request.

        Raises:
            InvalidInstallation: the body is not a version-1 request (field ``body``).
        """
        try:
            data: Any = json.loads(body)
            if data.get("version") != SCHEMA_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            deadline = datetime.fromisoformat(data["deadline"])
            if deadline.tzinfo is None:
                raise ValueError("deadline has no time zone")
            params = data.get("params") or {}
            if not isinstance(params, dict):
                raise ValueError("params is not an object")
            return cls(
                request_id=str(data["request_id"]),
                kind=RequestKind(data["kind"]),
                team_id=str(data["team_id"]),
                installation_id=str(data["installation_id"]),
                config_hash=str(data["config_hash"]),
                deadline=deadline,
                params=params,
                reply_to=data.get("reply_to"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInstallation("body", f"not a worker request: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to one request, correlated by the request id."""

    correlation_id: str
    result: dict[str, Any] | None = None
    error_kind: ReplyError | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def to_json(self) -> str:
        data: dict[str, Any] = {"version": SCHEMA_VERSION, "correlation_id": self.correlation_id, "ok": self.ok}
        if self.ok:
            data["result"] = self.result or {}
        else:
            data["error"] = {"kind": str(self.error_kind), "message": self.error_message or ""}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> Reply:
        """Parse a reply.

        Raises:
            InvalidInstallation: the body is not a version-1 reply (field ``body``).
        """
        try:
            data: Any = json.loads(body)
            if data.get("version") != SCHEMA_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            if data["ok"]:
                return cls(correlation_id=str(data["correlation_id"]), result=dict(data["result"]))
            error = data["error"]
            return cls(
                correlation_id=str(data["correlation_id"]),
                error_kind=ReplyError(error["kind"]),
                error_message=str(error["message"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInstallation("body", f"not a worker reply: {exc}") from exc
