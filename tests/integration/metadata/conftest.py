"""Emulators for the metadata pipeline: moto for the EventBridge rule -> SQS path, both emulators for the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from satellite.aws.tables import ResourceClients, create_resources
from tests.support.aws import dynamodb_client, start_dynamodb_local, start_moto

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient

METADATA_TABLE = "satellite-metadata-test"
_STARTERS = {"moto": start_moto, "dynamodb-local": start_dynamodb_local}


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One moto server for the pipeline tests (EventBridge, SQS and DynamoDB)."""
    with start_moto() as endpoint:
        yield endpoint


@pytest.fixture(scope="session", params=sorted(_STARTERS))
def metadata_dynamodb(request: pytest.FixtureRequest, moto_endpoint: str) -> Iterator[DynamoDBClient]:
    """A client for one emulator holding the metadata table; the store's contract holds on both."""
    if request.param == "moto":
        client = dynamodb_client(moto_endpoint)
        create_resources(ResourceClients(dynamodb=client), {"MetadataTable": METADATA_TABLE})
        yield client
        return
    with start_dynamodb_local() as endpoint:
        client = dynamodb_client(endpoint)
        create_resources(ResourceClients(dynamodb=client), {"MetadataTable": METADATA_TABLE})
        yield client
