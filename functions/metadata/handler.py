"""Lambda entry point of the metadata batcher: SQS buffer (fed by the tools-discovered rule) -> metadata table."""

from __future__ import annotations

from satellite.aws.metadata_store import DynamoMetadataStore
from satellite.config import Settings
from satellite.metadata_consumer import build_handler

handler = build_handler(DynamoMetadataStore(Settings.from_environment().metadata_table))
