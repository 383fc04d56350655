"""Fargate workers hosting stdio MCP servers (reached through SQS request/response queues)."""
