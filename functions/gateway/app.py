"""Lambda entry point of the gateway: API Gateway HTTP API -> Mangum -> FastAPI -> stateless MCP."""

from __future__ import annotations

from mangum import Mangum

from satellite.bootstrap import build_gateway
from satellite.config import Settings

gateway = build_gateway(Settings.from_environment())
app = gateway.app
handler = Mangum(app, lifespan="off")
