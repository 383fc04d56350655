"""stdio MCP servers: run as subprocesses on long-lived workers, reached through SQS request/reply queues."""
