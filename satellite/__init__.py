"""Satellite: a serverless MCP gateway for AWS that routes many upstream MCP servers behind four meta-tools.

The core package shared by the Lambda functions (``functions/``) and the stdio workers (``workers/``):
installations and catalog (pure), search, router, upstream clients, AWS adapters and the local stack.
"""

__version__ = "0.1.0"
