"""Talking to upstream MCP servers: connections, discovery, sanitising and pooled remote calls."""

from __future__ import annotations

from satellite.upstream.connection import UpstreamSession, classify_failure, open_session
from satellite.upstream.discovery import DiscoveryReport, discover, discover_many
from satellite.upstream.remote import RemoteUpstream
from satellite.upstream.sanitise import clean_text, sanitise_resources, sanitise_templates, sanitise_tools

__all__ = [
    "DiscoveryReport",
    "RemoteUpstream",
    "UpstreamSession",
    "classify_failure",
    "clean_text",
    "discover",
    "discover_many",
    "open_session",
    "sanitise_resources",
    "sanitise_templates",
    "sanitise_tools",
]
