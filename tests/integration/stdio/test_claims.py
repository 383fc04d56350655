"""Request-id claims on DynamoDB Local (AWS's own engine, for the conditional-write race)."""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

import pytest

from satellite.aws.claims_store import DynamoClaimsStore
from satellite.aws.tables import create_tables
from tests.support.aws import dynamodb_client, start_dynamodb_local

if TYPE_CHECKING:
    from collections.abc import Iterator

TABLE = "claims-race"


@pytest.fixture(scope="module")
def claims() -> Iterator[DynamoClaimsStore]:
    with start_dynamodb_local() as endpoint:
        client = dynamodb_client(endpoint)
        create_tables(client, {"ClaimsTable": TABLE})
        yield DynamoClaimsStore(TABLE, client)


def test_exactly_one_of_many_concurrent_claims_wins(claims: DynamoClaimsStore) -> None:
    # Given one request id and sixteen workers claiming it at the same moment
    request_id = str(uuid.uuid4())
    start = threading.Barrier(16)
    results: list[bool] = []

    def claim() -> None:
        start.wait(timeout=10)
        results.append(claims.claim(request_id, 60))

    # When they all claim
    threads = [threading.Thread(target=claim) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    # Then exactly one claim won
    assert sorted(results) == [False] * 15 + [True]


def test_a_recorded_outcome_is_returned_to_later_readers(claims: DynamoClaimsStore) -> None:
    # Given a claimed request with no outcome yet
    request_id = str(uuid.uuid4())
    assert claims.claim(request_id, 60)
    assert claims.outcome(request_id) is None

    # When its outcome is recorded
    claims.record_outcome(request_id, '{"version":1}')

    # Then readers get it, and the id can still not be claimed again
    assert claims.outcome(request_id) == '{"version":1}'
    assert not claims.claim(request_id, 60)
