"""Fixtures for the stdio worker tests: moto (SQS, DynamoDB) per module, installations of real npm servers."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import anyio.to_thread
import pytest

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.tables import create_tables
from satellite.config import Settings
from satellite.installation import Installation, Transport
from tests.support.aws import dynamodb_client, sqs_client, start_moto
from tests.support.upstreams import EVERYTHING_ENTRY, NODE_MODULES
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from satellite.catalog import InstallationCatalog

MEMORY_ENTRY = NODE_MODULES / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
CATALOG_TABLE = "satellite-catalog-stdio"
CLAIMS_TABLE = "satellite-claims-stdio"
EVERYTHING_TOOLS = 13
MEMORY_TOOLS = 9


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with start_moto() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def dynamodb(moto_endpoint: str) -> DynamoDBClient:
    client = dynamodb_client(moto_endpoint)
    create_tables(client, {"CatalogTable": CATALOG_TABLE, "ClaimsTable": CLAIMS_TABLE})
    return client


@pytest.fixture(scope="session")
def sqs(moto_endpoint: str) -> SQSClient:
    return sqs_client(moto_endpoint)


@pytest.fixture(scope="session")
def store(dynamodb: DynamoDBClient) -> DynamoCatalogStore:
    return DynamoCatalogStore(CATALOG_TABLE, dynamodb)


@pytest.fixture
def team_id() -> str:
    return f"team-{uuid.uuid4().hex[:8]}"


def worker_settings(root: Path, **overrides: object) -> Settings:
    """Settings of a worker under ``root`` with the test process's PATH only."""
    values: dict[str, object] = {
        "worker_root": str(root),
        "catalog_table": CATALOG_TABLE,
        "claims_table": CLAIMS_TABLE,
        "discovery_timeout_seconds": 20.0,
        "environment": {"PATH": os.environ["PATH"]},
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def everything(team_id: str, slug: str = "everything", **fields: object) -> Installation:
    """server-everything over stdio."""
    return Installation(
        installation_id=f"{team_id}-{slug}",
        team_id=team_id,
        slug=slug,
        transport=Transport.STDIO,
        command="node",
        args=(str(EVERYTHING_ENTRY), "stdio"),
        **fields,  # type: ignore[arg-type]
    )


def memory(team_id: str, folder: Path, slug: str = "memory") -> Installation:
    """server-memory with its knowledge graph in ``folder``."""
    return Installation(
        installation_id=f"{team_id}-{slug}",
        team_id=team_id,
        slug=slug,
        transport=Transport.STDIO,
        command="node",
        args=(str(MEMORY_ENTRY),),
        env={"MEMORY_FILE_PATH": str(folder / f"{slug}.jsonl")},
    )


def installed(store: DynamoCatalogStore, installation: Installation) -> InstallationCatalog:
    """Add ``installation`` to the store; its catalog entry as a worker loads it."""
    store.add_installation(installation)
    return entry_of(store, installation)


def entry_of(store: DynamoCatalogStore, installation: Installation) -> InstallationCatalog:
    catalog = store.load_catalog(installation.team_id)
    return next(e for e in catalog.installations if e.installation.installation_id == installation.installation_id)


async def wait_until(condition: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    """A bounded poll of ``condition`` in a thread, so the event loop keeps running the code under test."""
    await anyio.to_thread.run_sync(eventually, condition, what, timeout)
