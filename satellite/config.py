"""Settings, validated once at the edge into typed objects; the only module that names environment variables.

Every long wait has a setting here with a documented default:

============================================  =======  ==============================================
variable                                      default  meaning
============================================  =======  ==============================================
SATELLITE_CATALOG_TABLE                       -        DynamoDB table holding catalogs (required)
SATELLITE_TOKENS                              ``{}``   JSON ``{"token": {"team": "t1", "user": null}}``
SATELLITE_DISCOVERY_TIMEOUT_SECONDS           30       per-server discovery timeout, at most 120
SATELLITE_DISCOVERY_CONCURRENCY               2        servers discovered at once (seed 003's limit)
SATELLITE_CALL_TIMEOUT_SECONDS                25       upstream tools/call and resources/read timeout
SATELLITE_CONNECT_TIMEOUT_SECONDS             5        TCP/HTTP connect timeout to an upstream
SATELLITE_MAX_REQUEST_BYTES                   1048576  largest accepted POST /mcp body
SATELLITE_MAX_TOOLS                           1000     tools kept per server (excess is reported)
SATELLITE_MAX_PAGES                           100      list pages followed per list call
SATELLITE_MAX_DESCRIPTION_CHARS               32768    description length kept (longer is cut and reported)
SATELLITE_MAX_SCHEMA_BYTES                    131072   input schema size kept (larger is replaced and reported)
SATELLITE_ALLOWED_HOSTS                       ``*``    comma list of Host values for /mcp; ``*`` allows any
SATELLITE_CATALOG_CHECK_INTERVAL_MS           0        check the catalog version at most this often (0: every request)
SATELLITE_DISCOVERY_QUEUE_URL                 -        SQS queue of discovery requests (installations API, schedule)
SATELLITE_EVENT_BUS_NAME                      -        EventBridge bus receiving ``mcp.tools.discovered``
SATELLITE_METADATA_TABLE                      -        DynamoDB table of per-tool metadata (token counts)
SATELLITE_REDISCOVERY_TTL_SECONDS             3600     a remote server's cache older than this is rediscovered
SATELLITE_STATUS_ROUTE                        off      ``on`` serves the debug route ``GET /api/status``
SATELLITE_WORKER_QUEUE_URL                    -        SQS queue of requests to the stdio workers
SATELLITE_CLAIMS_TABLE                        -        DynamoDB table of request-id claims (at-most-once execution)
SATELLITE_STDIO_DEADLINE_SECONDS              25       stdio call deadline through the queues (below API Gateway's 30)
SATELLITE_REPLY_QUEUE_PREFIX                  satellite-reply-  name prefix of the gateway's reply queues
SATELLITE_REPLY_QUEUE_STALE_SECONDS           3600     a reply queue unused this long is swept
SATELLITE_IDLE_TIMEOUT_SECONDS                180      a stdio server idle this long is stopped (tools stay cached)
SATELLITE_MAX_PROCESSES                       32       stdio servers one worker runs at once (LRU idle ones stop first)
SATELLITE_WORKER_CONCURRENCY                  64       requests one worker executes at once
SATELLITE_WORKER_STOP_GRACE_SECONDS           20       on SIGTERM, how long in-flight calls may take to finish
SATELLITE_WORKER_ROOT                         /tmp/satellite-worker  per-installation working and temp folders
SATELLITE_CLAIM_TTL_SECONDS                   86400    how long a request-id claim (and its recorded outcome) is kept
SATELLITE_LOCAL_SCHEDULE_SECONDS              900      local stack: how often the rediscovery schedule fires
SATELLITE_LOCAL_START_TIMEOUT_SECONDS         30       local stack: how long to wait for the emulator and servers
============================================  =======  ==============================================
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from satellite.errors import InvalidInstallation

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DiscoveryLimits", "Identity", "Settings"]

MAX_DISCOVERY_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling: every read and write is scoped to ``team_id``."""

    team_id: str
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class DiscoveryLimits:
    """Sanitising limits; the defaults keep real servers (GitHub's ~90 tools, long descriptions) whole."""

    max_tools: int = 1000
    max_pages: int = 100
    max_description_chars: int = 32768
    max_schema_bytes: int = 131072


@dataclass(frozen=True, slots=True)
class Settings:
    """All settings of one process."""

    catalog_table: str = "satellite-catalog"
    tokens: Mapping[str, Identity] = field(default_factory=dict)
    discovery_timeout_seconds: float = 30.0
    discovery_concurrency: int = 2
    call_timeout_seconds: float = 25.0
    connect_timeout_seconds: float = 5.0
    max_request_bytes: int = 1024 * 1024
    limits: DiscoveryLimits = field(default_factory=DiscoveryLimits)
    allowed_hosts: tuple[str, ...] = ("*",)
    catalog_check_interval_seconds: float = 0.0
    discovery_queue_url: str = ""
    event_bus_name: str = ""
    metadata_table: str = ""
    rediscovery_ttl_seconds: float = 3600.0
    status_route: bool = False
    worker_queue_url: str = ""
    claims_table: str = ""
    stdio_deadline_seconds: float = 25.0
    reply_queue_prefix: str = "satellite-reply-"
    reply_queue_stale_seconds: float = 3600.0
    idle_timeout_seconds: float = 180.0
    max_processes: int = 32
    worker_concurrency: int = 64
    worker_stop_grace_seconds: float = 20.0
    worker_root: str = "/tmp/satellite-worker"
    claim_ttl_seconds: int = 86400
    local_schedule_seconds: float = 900.0
    local_start_timeout_seconds: float = 30.0
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and validate settings from ``environ`` (the process environment by default).

        ``environment`` keeps the whole mapping: ``${VAR}`` placeholders in installation headers
        resolve from it at call time.

        Raises:
            InvalidInstallation: a variable holds a value of the wrong type or out of range.
        """
        env = dict(os.environ if environ is None else environ)
        limits = DiscoveryLimits(
            max_tools=_int(env, "SATELLITE_MAX_TOOLS", 1000),
            max_pages=_int(env, "SATELLITE_MAX_PAGES", 100),
            max_description_chars=_int(env, "SATELLITE_MAX_DESCRIPTION_CHARS", 32768),
            max_schema_bytes=_int(env, "SATELLITE_MAX_SCHEMA_BYTES", 131072),
        )
        discovery_timeout = _float(env, "SATELLITE_DISCOVERY_TIMEOUT_SECONDS", 30.0)
        if discovery_timeout > MAX_DISCOVERY_TIMEOUT_SECONDS:
            raise InvalidInstallation("SATELLITE_DISCOVERY_TIMEOUT_SECONDS", "must be at most 120 seconds")
        hosts = tuple(h.strip() for h in env.get("SATELLITE_ALLOWED_HOSTS", "*").split(",") if h.strip())
        return cls(
            catalog_table=env.get("SATELLITE_CATALOG_TABLE", "satellite-catalog"),
            tokens=_tokens(env.get("SATELLITE_TOKENS", "{}")),
            discovery_timeout_seconds=discovery_timeout,
            discovery_concurrency=_int(env, "SATELLITE_DISCOVERY_CONCURRENCY", 2),
            call_timeout_seconds=_float(env, "SATELLITE_CALL_TIMEOUT_SECONDS", 25.0),
            connect_timeout_seconds=_float(env, "SATELLITE_CONNECT_TIMEOUT_SECONDS", 5.0),
            max_request_bytes=_int(env, "SATELLITE_MAX_REQUEST_BYTES", 1024 * 1024),
            limits=limits,
            allowed_hosts=hosts or ("*",),
            catalog_check_interval_seconds=_int(env, "SATELLITE_CATALOG_CHECK_INTERVAL_MS", 0, minimum=0) / 1000,
            discovery_queue_url=env.get("SATELLITE_DISCOVERY_QUEUE_URL", ""),
            event_bus_name=env.get("SATELLITE_EVENT_BUS_NAME", ""),
            metadata_table=env.get("SATELLITE_METADATA_TABLE", ""),
            rediscovery_ttl_seconds=_float(env, "SATELLITE_REDISCOVERY_TTL_SECONDS", 3600.0),
            status_route=env.get("SATELLITE_STATUS_ROUTE", "off").lower() in ("on", "true", "1"),
            worker_queue_url=env.get("SATELLITE_WORKER_QUEUE_URL", ""),
            claims_table=env.get("SATELLITE_CLAIMS_TABLE", ""),
            stdio_deadline_seconds=_float(env, "SATELLITE_STDIO_DEADLINE_SECONDS", 25.0),
            reply_queue_prefix=env.get("SATELLITE_REPLY_QUEUE_PREFIX", "satellite-reply-"),
            reply_queue_stale_seconds=_float(env, "SATELLITE_REPLY_QUEUE_STALE_SECONDS", 3600.0),
            idle_timeout_seconds=_float(env, "SATELLITE_IDLE_TIMEOUT_SECONDS", 180.0),
            max_processes=_int(env, "SATELLITE_MAX_PROCESSES", 32),
            worker_concurrency=_int(env, "SATELLITE_WORKER_CONCURRENCY", 64),
            worker_stop_grace_seconds=_float(env, "SATELLITE_WORKER_STOP_GRACE_SECONDS", 20.0),
            worker_root=env.get("SATELLITE_WORKER_ROOT", "/tmp/satellite-worker"),
            claim_ttl_seconds=_int(env, "SATELLITE_CLAIM_TTL_SECONDS", 86400),
            local_schedule_seconds=_float(env, "SATELLITE_LOCAL_SCHEDULE_SECONDS", 900.0),
            local_start_timeout_seconds=_float(env, "SATELLITE_LOCAL_START_TIMEOUT_SECONDS", 30.0),
            environment=env,
        )


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidInstallation(name, f"{raw!r} is not an integer") from exc
    if value < minimum:
        raise InvalidInstallation(name, f"must be an integer of at least {minimum}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise InvalidInstallation(name, f"{raw!r} is not a number of seconds") from exc
    if value <= 0:
        raise InvalidInstallation(name, "must be a positive number of seconds")
    return value


def _tokens(raw: str) -> dict[str, Identity]:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInstallation("SATELLITE_TOKENS", f"is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInstallation("SATELLITE_TOKENS", 'must be a JSON object {"token": {"team": ..., "user": ...}}')
    tokens: dict[str, Identity] = {}
    for token, who in data.items():
        if not isinstance(who, dict) or not isinstance(who.get("team"), str) or not who["team"]:
            raise InvalidInstallation("SATELLITE_TOKENS", f"entry for a token must name a team: {who!r}")
        user = who.get("user")
        tokens[str(token)] = Identity(team_id=who["team"], user_id=str(user) if user else None)
    return tokens
