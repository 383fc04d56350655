"""The metadata store's contract on moto and DynamoDB Local: atomic replacement, replays, removal, concurrency."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING

from satellite.aws.metadata_store import DynamoMetadataStore
from satellite.metadata import Outcome, build_events, parse_event
from tests.integration.metadata.conftest import METADATA_TABLE
from tests.unit.test_metadata import DISCOVERED_AT, installation, synthetic_catalog

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from satellite.metadata import MetadataPart

# Small parts, so every catalog in these tests spans several of them.
PART_BYTES = 8 * 1024


def parts_of(team_id: str, tool_count: int, minutes: int, seed: str = "") -> list[MetadataPart]:
    discovered = synthetic_catalog(tool_count, discovered_at=DISCOVERED_AT + timedelta(minutes=minutes), seed=seed)
    details = build_events(installation(team_id=team_id), discovered, part_bytes=PART_BYTES)
    return [parse_event(detail) for detail in details]


def team() -> str:
    return f"team-{uuid.uuid4().hex[:8]}"


def raw_items(client: DynamoDBClient, team_id: str) -> list[dict[str, object]]:
    response = client.query(
        TableName=METADATA_TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"TEAM#{team_id}"}},
        ConsistentRead=True,
    )
    return sorted(response["Items"], key=lambda item: str(item["sk"]))


def test_replayed_parts_write_nothing_and_report_already_stored(metadata_dynamodb: DynamoDBClient) -> None:
    # Given a stored multi-part discovery
    store = DynamoMetadataStore(METADATA_TABLE, client=metadata_dynamodb)
    team_id = team()
    parts = parts_of(team_id, 60, 0)
    assert len(parts) > 2
    outcomes = [store.store_part(part) for part in parts]
    before = raw_items(metadata_dynamodb, team_id)

    # When every part is stored again
    replayed = [store.store_part(part) for part in parts]

    # Then the last part completed the first round, the replay changed nothing
    assert outcomes == [Outcome.STAGED] * (len(parts) - 1) + [Outcome.STORED]
    assert replayed == [Outcome.ALREADY_STORED] * len(parts)
    assert raw_items(metadata_dynamodb, team_id) == before


def test_readers_never_see_partial_metadata_while_it_is_replaced(metadata_dynamodb: DynamoDBClient) -> None:
    # Given two multi-part catalogs of different sizes, replaced in turn by newer discoveries
    store = DynamoMetadataStore(METADATA_TABLE, client=metadata_dynamodb)
    team_id = team()
    rounds = [parts_of(team_id, 40 if index % 2 else 25, index, seed=f" Round {index}.") for index in range(8)]
    expected = {r[0].generation: [t["tool_name"] for p in r for t in p.tools] for r in rounds}
    for part in rounds[0]:
        store.store_part(part)
    done = threading.Event()
    seen: list[str] = []
    torn: list[str] = []

    def read() -> None:
        # A bounded reader loop: it stops when the writer is done (or after a deadline).
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            current = store.installation_metadata(team_id, "i-1")
            assert current is not None
            names = [t.tool_name for t in current.tools]
            if names != expected.get(current.generation) or len(names) != current.totals.tool_count:
                torn.append(f"{current.generation}: {len(names)} of {current.totals.tool_count}")
            seen.append(current.generation)

    # When a reader loops while the writer stores seven replacements, part by part
    reader = threading.Thread(target=read)
    reader.start()
    try:
        for parts in rounds[1:]:
            for part in parts:
                store.store_part(part)
    finally:
        done.set()
        reader.join(timeout=60)

    # Then every read was one whole generation
    assert torn == []
    assert len(seen) > 0
    assert seen[-1] in expected
    final = store.installation_metadata(team_id, "i-1")
    assert final is not None and final.generation == rounds[-1][0].generation


def test_concurrent_deliveries_of_one_generation_store_it_once(metadata_dynamodb: DynamoDBClient) -> None:
    # Given every part of one discovery delivered twice, concurrently
    store = DynamoMetadataStore(METADATA_TABLE, client=metadata_dynamodb)
    team_id = team()
    parts = parts_of(team_id, 50, 0)

    # When they are stored from four threads
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(store.store_part, parts + parts))

    # Then the generation became current (at least one STORED, never an error) and reads whole
    assert Outcome.STORED in outcomes
    assert set(outcomes) <= {Outcome.STAGED, Outcome.STORED, Outcome.ALREADY_STORED}
    current = store.installation_metadata(team_id, "i-1")
    assert current is not None and len(current.tools) == 50


def test_removing_an_installation_clears_it_and_refuses_its_late_events(metadata_dynamodb: DynamoDBClient) -> None:
    # Given a stored discovery
    store = DynamoMetadataStore(METADATA_TABLE, client=metadata_dynamodb)
    team_id = team()
    parts = parts_of(team_id, 30, 0)
    for part in parts:
        store.store_part(part)

    # When the installation is removed and its discovery's events are delivered again
    store.remove_installation(team_id, "i-1")
    late = [store.store_part(part) for part in parts]

    # Then nothing of it is served or stored: only the expiring tombstone is left
    assert late == [Outcome.SUPERSEDED] * len(parts)
    assert store.installation_metadata(team_id, "i-1") is None
    assert store.team_totals(team_id) == []
    [tombstone] = raw_items(metadata_dynamodb, team_id)
    assert tombstone["kind"] == {"S": "removed"}
    assert "expires_at" in tombstone
