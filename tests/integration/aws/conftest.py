"""Emulator fixtures shared by the DynamoDB adapter tests: every test runs against moto and DynamoDB Local."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from satellite.aws.tables import create_tables
from tests.support.aws import dynamodb_client, start_dynamodb_local, start_moto

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient

CATALOG_TABLE = "satellite-catalog-test"
_STARTERS = {"moto": start_moto, "dynamodb-local": start_dynamodb_local}


@pytest.fixture(scope="session", params=sorted(_STARTERS))
def dynamodb(request: pytest.FixtureRequest) -> Iterator[DynamoDBClient]:
    """A client for one emulator; session-scoped so each emulator starts once for all adapter tests."""
    with _STARTERS[request.param]() as endpoint:
        yield dynamodb_client(endpoint)


@pytest.fixture(scope="session")
def catalog_table(dynamodb: DynamoDBClient) -> str:
    """The catalog table, created from template.yaml once per emulator; tests isolate by team id."""
    create_tables(dynamodb, {"CatalogTable": CATALOG_TABLE})
    return CATALOG_TABLE
