"""The cached catalog: tools, resources and templates per installation, with status. Pure, no I/O.

Externally a tool is addressed as ``slug:tool`` (split on the first ``:``; slugs never contain one)
and a resource as ``slug|uri`` (split on the first ``|``; URIs often contain ``:``). Internally
everything is keyed by installation, never by parsing strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from satellite.errors import InvalidInstallation, NotFound

if TYPE_CHECKING:
    from datetime import datetime

    from satellite.installation import Installation, Transport

__all__ = [
    "CachedResource",
    "CachedResourceTemplate",
    "CachedTool",
    "DiscoveredCatalog",
    "DiscoveryState",
    "ErrorClass",
    "InstallationCatalog",
    "InstallationStatus",
    "Status",
    "TeamCatalog",
    "format_resource_uri",
    "format_tool_path",
    "parse_resource_uri",
    "parse_tool_path",
    "rewrite_ui_meta",
]

TOOL_SEPARATOR = ":"
RESOURCE_SEPARATOR = "|"


class Status(StrEnum):
    """Where an installation stands; only ``online`` and ``dormant`` installations are served."""

    NEVER = "never"
    DISCOVERING = "discovering"
    ONLINE = "online"
    DORMANT = "dormant"
    OFFLINE = "offline"
    ERROR = "error"

    @property
    def serves(self) -> bool:
        return self in (Status.ONLINE, Status.DORMANT)


class DiscoveryState(StrEnum):
    """Where the installation's latest discovery stands (seed 003): ``never`` -> ``discovering`` -> an outcome."""

    NEVER = "never"
    DISCOVERING = "discovering"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"


class ErrorClass(StrEnum):
    """Whether a failure may heal by itself (retry later) or needs the user to change something."""

    RETRY_LATER = "retry_later"
    NEEDS_USER_ACTION = "needs_user_action"


@dataclass(frozen=True, slots=True)
class InstallationStatus:
    """The status of one installation, when it last changed, and the last error, if any.

    ``status`` says whether it is served; ``discovery`` where its latest discovery stands. A failure
    carries its ``failure_kind`` (e.g. ``unreachable``, ``auth``, ``command_not_found``), its
    ``error_class`` and a one-line ``suggestion`` for the user.
    """

    status: Status
    changed_at: datetime
    last_error: str | None = None
    failure_kind: str | None = None
    discovery: DiscoveryState = DiscoveryState.NEVER
    error_class: ErrorClass | None = None
    suggestion: str | None = None


def format_tool_path(slug: str, tool_name: str) -> str:
    return f"{slug}{TOOL_SEPARATOR}{tool_name}"


def parse_tool_path(tool_path: str) -> tuple[str, str]:
    """Split ``slug:tool`` on the first ``:``.

    Raises:
        InvalidInstallation: the path has no ``:`` or an empty side (field ``tool_path``).
    """
    slug, sep, name = tool_path.partition(TOOL_SEPARATOR)
    if not sep or not slug or not name:
        raise InvalidInstallation(
            "tool_path", f"{tool_path!r} is not a tool path; use 'server:tool' as returned by discover_mcp_tools"
        )
    return slug, name


def format_resource_uri(slug: str, uri: str) -> str:
    return f"{slug}{RESOURCE_SEPARATOR}{uri}"


def parse_resource_uri(namespaced_uri: str) -> tuple[str, str]:
    """Split ``slug|uri`` on the first ``|``.

    Raises:
        InvalidInstallation: the URI has no ``|`` or an empty side (field ``uri``).
    """
    slug, sep, uri = namespaced_uri.partition(RESOURCE_SEPARATOR)
    if not sep or not slug or not uri:
        raise InvalidInstallation(
            "uri", f"{namespaced_uri!r} is not a namespaced resource URI; use 'server|uri' from list_mcp_resources"
        )
    return slug, uri


def rewrite_ui_meta(meta: Mapping[str, Any] | None, slug: str) -> dict[str, Any] | None:
    """Copy ``_meta`` with ``ui.resourceUri`` and the flat ``ui/resourceUri`` namespaced as ``slug|uri``."""
    if meta is None:
        return None
    rewritten = dict(meta)
    ui = rewritten.get("ui")
    if isinstance(ui, Mapping) and isinstance(ui.get("resourceUri"), str):
        rewritten["ui"] = {**ui, "resourceUri": format_resource_uri(slug, ui["resourceUri"])}
    flat = rewritten.get("ui/resourceUri")
    if isinstance(flat, str):
        rewritten["ui/resourceUri"] = format_resource_uri(slug, flat)
    return rewritten


@dataclass(frozen=True, slots=True)
class CachedTool:
    """A tool exactly as the server sent it (after sanitising), and when and how it was discovered."""

    definition: Mapping[str, Any]
    discovered_at: datetime
    transport: Transport
    search_embedding: bytes | None = None

    @property
    def name(self) -> str:
        return str(self.definition["name"])

    @property
    def description(self) -> str:
        return str(self.definition.get("description") or "")

    @property
    def input_schema(self) -> Mapping[str, Any]:
        schema = self.definition.get("inputSchema")
        return schema if isinstance(schema, Mapping) else {}

    @property
    def meta(self) -> Mapping[str, Any] | None:
        meta = self.definition.get("_meta")
        return meta if isinstance(meta, Mapping) else None


@dataclass(frozen=True, slots=True)
class CachedResource:
    """A resource's metadata as the server sent it; its content is never cached."""

    definition: Mapping[str, Any]
    discovered_at: datetime
    transport: Transport

    @property
    def uri(self) -> str:
        return str(self.definition["uri"])


@dataclass(frozen=True, slots=True)
class CachedResourceTemplate:
    """A resource template as the server sent it."""

    definition: Mapping[str, Any]
    discovered_at: datetime
    transport: Transport

    @property
    def uri_template(self) -> str:
        return str(self.definition["uriTemplate"])


@dataclass(frozen=True, slots=True)
class InstallationCatalog:
    """One installation with its status and what its last successful discovery found.

    ``discovered_at`` and ``filled_by`` say when and how the cached entries were filled;
    both are ``None`` while nothing was ever discovered.
    """

    installation: Installation
    status: InstallationStatus
    tools: tuple[CachedTool, ...] = ()
    resources: tuple[CachedResource, ...] = ()
    templates: tuple[CachedResourceTemplate, ...] = ()
    discovered_at: datetime | None = None
    filled_by: str | None = None
    discovered_config_hash: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        return self.installation.slug

    @property
    def serves(self) -> bool:
        """Whether calls may be routed here: enabled and in a serving status."""
        return self.installation.enabled and self.status.status.serves

    def tool(self, name: str) -> CachedTool | None:
        return next((t for t in self.tools if t.name == name), None)


@dataclass(frozen=True, slots=True)
class TeamCatalog:
    """A snapshot of one team's catalog at one catalog version."""

    team_id: str
    version: int
    installations: tuple[InstallationCatalog, ...] = field(default_factory=tuple)

    def visible_to(self, user_id: str | None) -> TeamCatalog:
        """The installations one caller sees: the team's shared ones and the caller's own.

        The caller's own instance of a slug shadows a shared installation with the same slug.
        """
        own = {
            e.slug
            for e in self.installations
            if e.installation.user_id is not None and e.installation.user_id == user_id
        }
        chosen = tuple(
            e
            for e in self.installations
            if (e.installation.user_id is None and e.slug not in own) or (e.installation.user_id == user_id and user_id)
        )
        return TeamCatalog(self.team_id, self.version, chosen)

    def by_slug(self, slug: str) -> InstallationCatalog:
        """The installation answering to ``slug``.

        Raises:
            NotFound: no installation of this team has the slug.
        """
        for entry in self.installations:
            if entry.slug == slug:
                return entry
        raise NotFound(f"no server {slug!r} is installed", tuple(sorted(e.slug for e in self.installations)))

    def serving(self) -> Iterator[InstallationCatalog]:
        return (e for e in self.installations if e.serves)

    def tool_paths(self, entries: Iterable[InstallationCatalog] | None = None) -> list[str]:
        source = self.installations if entries is None else entries
        return [format_tool_path(e.slug, t.name) for e in source for t in e.tools]


@dataclass(frozen=True, slots=True)
class DiscoveredCatalog:
    """What one successful discovery of one installation found, ready to replace its cached entries.

    ``filled_by`` says how the entries were filled, e.g. ``discovery:streamable_http``; ``warnings``
    lists every sanitising violation, each naming the tool (nothing is dropped or cut silently).
    """

    config_hash: str
    transport: Transport
    discovered_at: datetime
    filled_by: str
    tools: tuple[CachedTool, ...] = ()
    resources: tuple[CachedResource, ...] = ()
    templates: tuple[CachedResourceTemplate, ...] = ()
    warnings: tuple[str, ...] = ()
