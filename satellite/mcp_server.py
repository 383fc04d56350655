"""The MCP server clients see: exactly four meta-tools, plus native resources, over the router.

Errors become MCP results here and nowhere else: a ``SatelliteError`` from a meta-tool is an
``isError`` result whose text says what failed and what to do; unexpected errors propagate to the
SDK, which answers with a JSON-RPC internal error.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from satellite.errors import AuthenticationError, NotFound, SatelliteError, UpstreamError
from satellite.jsonutil import compact_json
from satellite.router import MAX_DISCOVER_LIMIT

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from satellite.config import Identity
    from satellite.router import Router

__all__ = ["META_TOOLS", "SERVER_NAME", "build_mcp_server", "current_identity"]

logger = logging.getLogger(__name__)

SERVER_NAME = "satellite"
current_identity: ContextVar[Identity] = ContextVar("current_identity")

META_TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name="discover_mcp_tools",
        description=(
            "Search every tool of every connected MCP server in natural language (e.g. 'create a github issue', "
            "'read a file'). Returns tool paths with a short description, an argument signature and a relevance "
            "score (0-1, higher is better). Run one with execute_mcp_tool."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What you want to do, in a few words"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_DISCOVER_LIMIT, "default": 10},
            },
            "required": ["query"],
        },
    ),
    types.Tool(
        name="execute_mcp_tool",
        description=(
            "Run a tool found with discover_mcp_tools. tool_path is 'server:tool'; arguments follow the "
            "tool's signature."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "tool_path": {"type": "string", "description": "'server:tool' from discover_mcp_tools"},
                "arguments": {"type": "object", "description": "The tool's arguments"},
            },
            "required": ["tool_path"],
        },
    ),
    types.Tool(
        name="list_mcp_resources",
        description="List the resources and resource templates of every connected MCP server, as 'server|uri'.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="read_mcp_resource",
        description="Read a resource by its 'server|uri' from list_mcp_resources (always fetched fresh).",
        input_schema={
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "'server|uri' from list_mcp_resources"}},
            "required": ["uri"],
        },
    ),
)


def build_mcp_server(router: Router, version: str) -> Server[Any]:
    """The low-level SDK server with the four meta-tools and native resources, routed by ``router``."""

    async def list_tools(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=list(META_TOOLS))

    async def call_tool(_ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        arguments = params.arguments or {}
        try:
            return await _call_meta_tool(router, _identity(), params.name, arguments)
        except SatelliteError as exc:
            return _error_result(exc)

    async def list_resources(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None) -> Any:
        listing = await router.list_resources(_identity())
        return types.ListResourcesResult.model_validate({"resources": listing["resources"]}, by_name=False)

    async def list_templates(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None) -> Any:
        listing = await router.list_resources(_identity())
        templates = listing["resource_templates"]
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": templates}, by_name=False)

    async def read_resource(_ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> Any:
        try:
            result = await router.read_resource(_identity(), str(params.uri))
        except SatelliteError as exc:
            raise _mcp_error(exc) from exc
        return types.ReadResourceResult.model_validate(result, by_name=False)

    return Server(
        SERVER_NAME,
        version=version,
        instructions=(
            "This server routes to many MCP servers. Find tools with discover_mcp_tools, run them with "
            "execute_mcp_tool; resources via list_mcp_resources and read_mcp_resource."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


async def _call_meta_tool(router: Router, identity: Identity, name: str, arguments: dict[str, Any]) -> Any:
    if name == "discover_mcp_tools":
        query = arguments.get("query")
        limit = arguments.get("limit", 10)
        if not isinstance(query, str):
            return _text_error("discover_mcp_tools needs 'query', a string describing what you want to do.")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_DISCOVER_LIMIT:
            return _text_error(f"'limit' must be an integer from 1 to {MAX_DISCOVER_LIMIT}.")
        return _json_result(await router.discover(identity, query, limit))
    if name == "execute_mcp_tool":
        tool_path = arguments.get("tool_path")
        tool_arguments = arguments.get("arguments", {})
        if not isinstance(tool_path, str):
            return _text_error(
                "execute_mcp_tool needs 'tool_path', e.g. 'github:create_issue' from discover_mcp_tools."
            )
        if not isinstance(tool_arguments, dict):
            return _text_error('\'arguments\' must be an object with the tool\'s arguments, e.g. {"message": "hi"}.')
        result = await router.execute(identity, tool_path, tool_arguments)
        return types.CallToolResult.model_validate(result, by_name=False)
    if name == "list_mcp_resources":
        return _json_result(await router.list_resources(identity))
    if name == "read_mcp_resource":
        uri = arguments.get("uri")
        if not isinstance(uri, str):
            return _text_error(
                "read_mcp_resource needs 'uri', e.g. 'server|file:///notes.txt' from list_mcp_resources."
            )
        result = await router.read_resource(identity, uri)
        embedded = [{"type": "resource", "resource": {**c, "uri": uri}} for c in result.get("contents", [])]
        return types.CallToolResult.model_validate({"content": embedded}, by_name=False)
    names = ", ".join(tool.name for tool in META_TOOLS)
    return _text_error(f"unknown tool {name!r}; this server has exactly four tools: {names}.")


def _identity() -> Identity:
    try:
        return current_identity.get()
    except LookupError as exc:
        raise AuthenticationError("no identity is bound to this request") from exc


def _json_result(payload: dict[str, Any]) -> types.CallToolResult:
    text = compact_json(payload)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _text_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def _describe(exc: SatelliteError) -> str:
    message = str(exc)
    if isinstance(exc, NotFound) and exc.suggestions:
        message += ". Did you mean: " + ", ".join(exc.suggestions) + "?"
    elif isinstance(exc, UpstreamError):
        message = f"The upstream call failed ({exc.kind}): {exc.message}"
    logger.info("meta-tool error", extra={"operation": "call_tool", "error": message})
    return message


def _error_result(exc: SatelliteError) -> types.CallToolResult:
    return _text_error(_describe(exc))


def _mcp_error(exc: SatelliteError) -> MCPError:
    code = types.INTERNAL_ERROR if isinstance(exc, UpstreamError) else types.INVALID_PARAMS
    return MCPError(code=code, message=_describe(exc))
