"""``/api``: the installations API, the cached catalog and the debug status, scoped to the caller's team.

Bad input is answered with a 4xx whose body names the field, in FastAPI's validation shape
``{"detail": [{"loc": ["body", field], "msg": ..., "type": ...}]}``; never a 500.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException, Request, status
from pydantic import BaseModel, Field

from satellite.catalog import format_tool_path
from satellite.config import Identity
from satellite.errors import DuplicateSlug, InvalidInstallation, NotFound
from satellite.installation import SLUG_PATTERN, Installation, Transport, derive_slug
from satellite.installations import InstallationService

if TYPE_CHECKING:
    from collections.abc import Callable

    from satellite.catalog import InstallationCatalog

__all__ = ["api_router", "status_router"]


class InstallationIn(BaseModel):
    """An installation as a client sends it; ``slug`` defaults to one derived from ``name``."""

    name: str = Field(min_length=1, max_length=200, examples=["github"])
    slug: str | None = Field(default=None, pattern=SLUG_PATTERN.pattern, examples=["github"])
    transport: Literal["streamable_http", "sse", "stdio"]
    url: str | None = Field(default=None, examples=["https://api.githubcopilot.com/mcp/"])
    command: str | None = Field(default=None, examples=["npx"])
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict, examples=[{"Authorization": "Bearer ${GITHUB_TOKEN}"}])
    enabled: bool = True
    timeout_seconds: float | None = Field(default=None, gt=0, le=120)
    user_id: str | None = None


class StatusOut(BaseModel):
    status: str
    changed_at: str
    discovery: str
    last_error: str | None = None
    failure_kind: str | None = None
    error_class: str | None = None
    suggestion: str | None = None


class InstallationOut(BaseModel):
    installation_id: str
    name: str
    slug: str
    transport: str
    url: str | None
    command: str | None
    args: list[str]
    env: dict[str, str]
    headers: dict[str, str]
    enabled: bool
    timeout_seconds: float | None
    user_id: str | None
    status: StatusOut
    tools: int
    resources: int
    templates: int
    discovered_at: str | None


class CatalogToolOut(BaseModel):
    tool_path: str
    name: str
    description: str
    server: str
    transport: str
    available: bool
    status: str
    discovery: str


def _identity(request: Request) -> Identity:
    identity: Identity | None = request.app.state.authenticate(request.scope)
    if identity is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "Missing or unknown bearer token: send 'Authorization: Bearer <token>'.",
            headers={"WWW-Authenticate": 'Bearer realm="satellite"'},
        )
    return identity


def _service(request: Request) -> InstallationService:
    service: InstallationService = request.app.state.installations
    return service


Caller = Annotated[Identity, Depends(_identity)]
Service = Annotated[InstallationService, Depends(_service)]

api_router = APIRouter(prefix="/api", tags=["installations"])
status_router = APIRouter(prefix="/api", tags=["debug"])


@api_router.get("/installations")
async def list_installations(who: Caller, service: Service) -> list[InstallationOut]:
    """Every installation of the caller's team, with status and counts, from the cache."""
    catalog = await anyio.to_thread.run_sync(service.catalog, who)
    return [_out(entry) for entry in catalog.installations]


@api_router.post("/installations", status_code=status.HTTP_202_ACCEPTED)
async def add_installation(body: InstallationIn, who: Caller, service: Service) -> InstallationOut:
    """Add an installation; answers at once with status ``discovering`` while discovery runs in the background."""
    installation = _installation(body, who, service.new_id())
    return _out(await _guard(lambda: service.add(installation)))


@api_router.get("/installations/{installation_id}")
async def get_installation(installation_id: str, who: Caller, service: Service) -> InstallationOut:
    """One installation with its status."""
    return _out(await _guard(lambda: service.get(who, installation_id)))


@api_router.put("/installations/{installation_id}")
async def update_installation(
    installation_id: str, body: InstallationIn, who: Caller, service: Service
) -> InstallationOut:
    """Replace an installation's configuration; rediscovers only when the configuration hash changes."""
    installation = _installation(body, who, installation_id)
    return _out(await _guard(lambda: service.update(who, installation)))


@api_router.delete("/installations/{installation_id}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_installation(installation_id: str, who: Caller, service: Service) -> None:
    """Remove an installation with its tools, resources and templates."""
    await _guard(lambda: service.remove(who, installation_id))


@api_router.get("/catalog")
async def catalog(who: Caller, service: Service) -> list[CatalogToolOut]:
    """Every tool of the team with server, transport, availability and discovery status; no upstream call."""
    team = await anyio.to_thread.run_sync(service.catalog, who)
    return [
        CatalogToolOut(
            tool_path=format_tool_path(entry.slug, tool.name),
            name=tool.name,
            description=tool.description,
            server=entry.slug,
            transport=str(entry.installation.transport),
            available=entry.serves,
            status=str(entry.status.status),
            discovery=str(entry.status.discovery),
        )
        for entry in team.installations
        for tool in entry.tools
    ]


@api_router.get("/tokens")
async def tokens(who: Caller, service: Service) -> dict[str, Any]:
    """Token savings: tokens with every tool exposed directly, with the four meta-tools, and the reduction."""
    return await anyio.to_thread.run_sync(service.token_savings, who)


@status_router.get("/status")
async def debug_status(who: Caller, service: Service) -> dict[str, Any]:
    """Debug view: tools by transport and by server, discovery statistics, server and stdio process status."""
    team = await anyio.to_thread.run_sync(service.catalog, who)
    by_transport: dict[str, list[str]] = {}
    for entry in team.installations:
        by_transport.setdefault(str(entry.installation.transport), []).extend(
            format_tool_path(entry.slug, t.name) for t in entry.tools
        )
    return {
        "team": who.team_id,
        "catalog_version": team.version,
        "tools_by_transport": by_transport,
        "servers": {entry.slug: _out(entry).model_dump() for entry in team.installations},
        "discovery": {
            state: sum(1 for e in team.installations if str(e.status.discovery) == state)
            for state in ("never", "discovering", "success", "failed", "timeout")
        },
        # As the workers record it: online is running, dormant stopped after idling (tools stay cached),
        # error crashed past the restart limit or could not start.
        "stdio_processes": {
            entry.slug: {"status": str(entry.status.status), "since": entry.status.changed_at.isoformat()}
            for entry in team.installations
            if entry.installation.transport is Transport.STDIO
        },
    }


async def _guard(action: Callable[[], InstallationCatalog | None]) -> Any:
    """Run a blocking store action off the event loop; domain errors become field-level 4xx responses."""
    try:
        return await anyio.to_thread.run_sync(action)
    except DuplicateSlug as exc:
        raise _field_error(status.HTTP_409_CONFLICT, exc) from exc
    except InvalidInstallation as exc:
        raise _field_error(status.HTTP_422_UNPROCESSABLE_CONTENT, exc) from exc
    except NotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc


def _installation(body: InstallationIn, who: Identity, installation_id: str) -> Installation:
    try:
        return Installation(
            installation_id=installation_id,
            team_id=who.team_id,
            user_id=body.user_id,
            slug=body.slug or derive_slug(body.name),
            name=body.name,
            transport=Transport(body.transport),
            url=body.url,
            command=body.command,
            args=tuple(body.args),
            env=body.env,
            headers=body.headers,
            enabled=body.enabled,
            timeout_seconds=body.timeout_seconds,
        )
    except InvalidInstallation as exc:
        raise _field_error(status.HTTP_422_UNPROCESSABLE_CONTENT, exc) from exc


def _field_error(code: int, exc: InvalidInstallation) -> HTTPException:
    return HTTPException(code, [{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}])


def _out(entry: InstallationCatalog) -> InstallationOut:
    installation = entry.installation
    state = entry.status
    return InstallationOut(
        installation_id=installation.installation_id,
        name=installation.name,
        slug=installation.slug,
        transport=str(installation.transport),
        url=installation.url,
        command=installation.command,
        args=list(installation.args),
        env=dict(installation.env),
        headers=dict(installation.headers),
        enabled=installation.enabled,
        timeout_seconds=installation.timeout_seconds,
        user_id=installation.user_id,
        status=StatusOut(
            status=str(state.status),
            changed_at=state.changed_at.isoformat(),
            discovery=str(state.discovery),
            last_error=state.last_error,
            failure_kind=state.failure_kind,
            error_class=None if state.error_class is None else str(state.error_class),
            suggestion=state.suggestion,
        ),
        tools=len(entry.tools),
        resources=len(entry.resources),
        templates=len(entry.templates),
        discovered_at=None if entry.discovered_at is None else entry.discovered_at.isoformat(),
    )
