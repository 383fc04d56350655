"""Contract tests of DynamoCatalogStore: every test runs against moto (server mode) and DynamoDB Local."""

from __future__ import annotations

import random
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from satellite.aws.catalog_store import PART_BYTES, DynamoCatalogStore
from satellite.catalog import (
    CachedResource,
    CachedResourceTemplate,
    CachedTool,
    DiscoveredCatalog,
    DiscoveryState,
    ErrorClass,
    InstallationStatus,
    Status,
)
from satellite.errors import ConflictError, DuplicateSlug, NotFound, StoreError
from satellite.installation import Installation, Transport

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from satellite.catalog import TeamCatalog

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def soon() -> datetime:
    """A moment after every changed_at the store wrote so far (it stamps status changes with its clock)."""
    return datetime.now(UTC) + timedelta(minutes=1)


@pytest.fixture
def store(dynamodb: DynamoDBClient, catalog_table: str) -> DynamoCatalogStore:
    return DynamoCatalogStore(catalog_table, dynamodb)


@pytest.fixture
def team() -> str:
    return f"team-{uuid.uuid4().hex[:12]}"


def remote(team_id: str, installation_id: str, slug: str, user_id: str | None = None) -> Installation:
    return Installation(
        installation_id=installation_id,
        team_id=team_id,
        slug=slug,
        transport=Transport.STREAMABLE_HTTP,
        user_id=user_id,
        name=f"{slug} server",
        # One URL for every slug: the configuration hash (url, headers) is then the same, see REMOTE_HASH.
        url="https://mcp.example.com/mcp",
        headers={"Authorization": "Bearer ${GITHUB_TOKEN}"},
        timeout_seconds=12.5,
    )


REMOTE_HASH = remote("any", "any", "any").config_hash


def stdio(team_id: str, installation_id: str, slug: str) -> Installation:
    return Installation(
        installation_id=installation_id,
        team_id=team_id,
        slug=slug,
        transport=Transport.STDIO,
        command="npx",
        args=("-y", "@modelcontextprotocol/server-everything"),
        name="Everything",
        env={"API_KEY": "${API_KEY}", "MODE": "fast"},
        enabled=False,
    )


def discovered(
    tools: int,
    at: datetime,
    label: str = "v1",
    *,
    noise_bytes: int = 0,
    seed: int = 0,
    config_hash: str = REMOTE_HASH,
) -> DiscoveredCatalog:
    """A catalog whose every description carries ``label``; ``noise_bytes`` of random hex defeat compression."""
    noise = random.Random(seed)
    return DiscoveredCatalog(
        config_hash=config_hash,
        transport=Transport.STREAMABLE_HTTP,
        discovered_at=at,
        filled_by="discovery:streamable_http",
        tools=tuple(
            CachedTool(
                definition={
                    "name": f"tool_{index}",
                    "description": f"{label} {noise.randbytes(noise_bytes).hex()}",
                    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                },
                discovered_at=at,
                transport=Transport.STREAMABLE_HTTP,
            )
            for index in range(tools)
        ),
        warnings=(f"{label}: tool_0 description was cut",),
    )


def raw_items(dynamodb: DynamoDBClient, table: str, team_id: str) -> list[dict[str, AttributeValueTypeDef]]:
    items: list[dict[str, AttributeValueTypeDef]] = []
    query: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": f"TEAM#{team_id}"}},
        "ConsistentRead": True,
    }
    while True:
        page = dynamodb.query(**query)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def part_items(dynamodb: DynamoDBClient, table: str, team_id: str) -> list[dict[str, AttributeValueTypeDef]]:
    return [i for i in raw_items(dynamodb, table, team_id) if "#CAT#" in i["sk"]["S"]]


def labels_of(catalog: TeamCatalog) -> set[str]:
    return {tool.description.split(" ", 1)[0] for entry in catalog.installations for tool in entry.tools}


def test_add_then_load_round_trips_every_field(
    store: DynamoCatalogStore, dynamodb: DynamoDBClient, catalog_table: str, team: str
) -> None:
    # Given a remote installation with a full discovered catalog and a disabled stdio installation
    github = remote(team, "i-github", "github", user_id="u1")
    everything = stdio(team, "i-everything", "everything")
    store.add_installation(github)
    store.add_installation(everything)
    at = T0 + timedelta(minutes=5)
    catalog = DiscoveredCatalog(
        config_hash=github.config_hash,
        transport=Transport.STREAMABLE_HTTP,
        discovered_at=at,
        filled_by="discovery:streamable_http",
        tools=(
            CachedTool(
                definition={
                    "name": "get-time",
                    "description": "What time is it — ünïcode kept",
                    "inputSchema": {"type": "object", "properties": {}},
                    "_meta": {"ui": {"resourceUri": "ui://get-time/mcp-app.html"}},
                },
                discovered_at=at,
                transport=Transport.STREAMABLE_HTTP,
                search_embedding=bytes(range(256)) * 2,
            ),
            CachedTool(definition={"name": "echo"}, discovered_at=at, transport=Transport.STREAMABLE_HTTP),
        ),
        resources=(
            CachedResource(
                definition={
                    "uri": "ui://get-time/mcp-app.html",
                    "name": "app",
                    "mimeType": "text/html;profile=mcp-app",
                },
                discovered_at=at,
                transport=Transport.STREAMABLE_HTTP,
            ),
        ),
        templates=(
            CachedResourceTemplate(
                definition={"uriTemplate": "repo://{owner}/{name}", "name": "repo"},
                discovered_at=at,
                transport=Transport.STREAMABLE_HTTP,
            ),
        ),
        warnings=("echo: description missing",),
    )

    # When the catalog replaces the empty one and the team is loaded
    store.replace_catalog(team, "i-github", catalog)
    loaded = store.load_catalog(team)

    # Then every field comes back as written
    assert loaded.team_id == team
    assert loaded.version == store.catalog_version(team) == 3
    by_id = {e.installation.installation_id: e for e in loaded.installations}
    assert set(by_id) == {"i-github", "i-everything"}
    entry = by_id["i-github"]
    assert entry.installation == github
    assert entry.status.status is Status.ONLINE
    assert entry.status.changed_at.tzinfo is not None
    assert entry.status.last_error is None
    assert entry.tools == catalog.tools
    assert entry.tools[0].search_embedding == bytes(range(256)) * 2
    assert entry.resources == catalog.resources
    assert entry.templates == catalog.templates
    assert entry.discovered_at == at
    assert entry.filled_by == "discovery:streamable_http"
    assert entry.discovered_config_hash == github.config_hash
    assert entry.warnings == ("echo: description missing",)
    never = by_id["i-everything"]
    assert never.installation == everything
    assert never.status.status is Status.NEVER
    assert (never.tools, never.resources, never.templates) == ((), (), ())
    assert never.discovered_at is None
    assert never.filled_by is None
    assert never.warnings == ()
    # And every stored item says when it was written
    assert all("written_at" in item for item in raw_items(dynamodb, catalog_table, team))


def test_duplicate_slug_is_rejected_with_a_clear_message(store: DynamoCatalogStore, team: str) -> None:
    # Given a shared installation with slug "github"
    store.add_installation(remote(team, "i-1", "github"))
    version = store.catalog_version(team)

    # When another shared installation takes the same slug
    with pytest.raises(DuplicateSlug) as raised:
        store.add_installation(remote(team, "i-2", "github"))

    # Then it is refused, nothing is stored and the version stays
    assert "github" in str(raised.value)
    assert raised.value.field == "slug"
    assert [e.installation.installation_id for e in store.load_catalog(team).installations] == ["i-1"]
    assert store.catalog_version(team) == version


def test_existing_installation_id_is_a_conflict(store: DynamoCatalogStore, team: str) -> None:
    # Given an installation
    store.add_installation(remote(team, "i-1", "github"))

    # When the same id is added again under another slug
    with pytest.raises(ConflictError):
        store.add_installation(remote(team, "i-1", "gitlab"))

    # Then the first is unchanged and the other slug stays free
    assert store.load_catalog(team).by_slug("github").installation.installation_id == "i-1"
    store.add_installation(remote(team, "i-2", "gitlab"))


def test_same_slug_for_two_users_and_the_team_is_allowed(store: DynamoCatalogStore, team: str) -> None:
    # Given one shared and two per-user installations with the same slug
    store.add_installation(remote(team, "i-shared", "github"))
    store.add_installation(remote(team, "i-u1", "github", user_id="u1"))
    store.add_installation(remote(team, "i-u2", "github", user_id="u2"))

    # When user u1 adds a second one with that slug
    with pytest.raises(DuplicateSlug):
        store.add_installation(remote(team, "i-u1-again", "github", user_id="u1"))

    # Then the three first ones are stored, each visible to its owner
    loaded = store.load_catalog(team)
    assert len(loaded.installations) == 3
    assert loaded.visible_to("u1").by_slug("github").installation.installation_id == "i-u1"
    assert loaded.visible_to("u3").by_slug("github").installation.installation_id == "i-shared"


def test_version_moves_on_each_write_and_not_on_reads(store: DynamoCatalogStore, team: str) -> None:
    # Given a team with nothing stored
    assert store.catalog_version(team) == 0
    versions = [0]

    def write_and_record() -> None:
        versions.append(store.catalog_version(team))

    # When each kind of write happens, with reads in between
    store.add_installation(remote(team, "i-1", "github"))
    write_and_record()
    for _ in range(3):
        store.load_catalog(team)
        store.catalog_version(team)
    write_and_record()
    store.update_installation(remote(team, "i-1", "github-enterprise"))
    write_and_record()
    store.replace_catalog(team, "i-1", discovered(3, T0))
    write_and_record()
    store.set_status(team, "i-1", InstallationStatus(Status.OFFLINE, soon(), "refused", "unreachable"))
    write_and_record()
    store.remove_installation(team, "i-1")
    write_and_record()

    # Then the version moved once per write, never on a read
    assert versions == [0, 1, 1, 2, 3, 4, 5]
    assert store.load_catalog(team).version == 5


def test_update_installation_moves_the_slug_and_keeps_status_and_catalog(store: DynamoCatalogStore, team: str) -> None:
    # Given an online installation with tools, and another installation using slug "gitlab"
    store.add_installation(remote(team, "i-1", "github"))
    store.add_installation(remote(team, "i-2", "gitlab"))
    store.replace_catalog(team, "i-1", discovered(4, T0))

    # When its slug changes to a taken one, then to a free one
    with pytest.raises(DuplicateSlug):
        store.update_installation(remote(team, "i-1", "gitlab"))
    unchanged = store.load_catalog(team).by_slug("github")
    renamed = Installation(
        installation_id="i-1",
        team_id=team,
        slug="gh",
        name="GitHub (SSE)",
        transport=Transport.SSE,
        url="https://gh.example.com/sse",
        headers={"X-Key": "${KEY}"},
    )
    store.update_installation(renamed)

    # Then the configuration changed, status and tools are kept, and the old slug is free again
    entry = store.load_catalog(team).by_slug("gh")
    assert entry.installation == renamed
    assert entry.status == unchanged.status
    assert entry.tools == unchanged.tools
    assert entry.discovered_at == T0
    store.add_installation(remote(team, "i-3", "github"))
    with pytest.raises(DuplicateSlug):
        store.add_installation(remote(team, "i-4", "gh"))


def test_update_of_a_missing_installation_is_not_found(store: DynamoCatalogStore, team: str) -> None:
    # Given an empty team / When an installation is updated / Then NotFound
    with pytest.raises(NotFound):
        store.update_installation(remote(team, "i-missing", "github"))
    assert store.catalog_version(team) == 0


def test_replace_is_atomic_for_concurrent_readers(dynamodb: DynamoDBClient, catalog_table: str, team: str) -> None:
    # Given an installation whose catalog generations each span several parts and differ in size
    store = DynamoCatalogStore(catalog_table, dynamodb, part_bytes=512, read_attempts=50)
    store.add_installation(remote(team, "i-1", "github"))
    generations = 8
    expected_tools = {f"g{g}": 20 + 5 * g for g in range(generations)}
    catalogs = [
        discovered(expected_tools[f"g{g}"], T0 + timedelta(seconds=g), f"g{g}", noise_bytes=32, seed=g)
        for g in range(generations)
    ]
    store.replace_catalog(team, "i-1", catalogs[0])
    assert len(part_items(dynamodb, catalog_table, team)) > 2
    writer_done = threading.Event()
    mixes: list[str] = []
    errors: list[BaseException] = []
    seen: set[str] = set()

    def write() -> None:
        try:
            for catalog in catalogs[1:]:
                store.replace_catalog(team, "i-1", catalog)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            writer_done.set()

    def read() -> None:
        try:
            for _ in range(2000):
                if writer_done.is_set():
                    return
                loaded = store.load_catalog(team)
                labels = labels_of(loaded)
                count = len(loaded.installations[0].tools)
                if len(labels) != 1 or count != expected_tools[next(iter(labels))]:
                    mixes.append(f"labels={sorted(labels)} tools={count}")
                seen.update(labels)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    # When readers load the team while a writer replaces the catalog generation after generation
    threads = [threading.Thread(target=write), *(threading.Thread(target=read) for _ in range(2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)

    # Then no reader ever saw a mix of two generations, and the last generation is what remains
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert mixes == []
    assert len(seen) >= 2
    final = store.load_catalog(team)
    assert labels_of(final) == {f"g{generations - 1}"}
    pointer = {i["sk"]["S"].split("#CAT#")[1].split("#")[0] for i in part_items(dynamodb, catalog_table, team)}
    assert len(pointer) == 1


def test_older_discovery_is_rejected(
    store: DynamoCatalogStore, dynamodb: DynamoDBClient, catalog_table: str, team: str
) -> None:
    # Given a catalog discovered at T0 + 1 h
    store.add_installation(remote(team, "i-1", "github"))
    store.replace_catalog(team, "i-1", discovered(3, T0 + timedelta(hours=1), "new"))
    parts_before = part_items(dynamodb, catalog_table, team)
    version = store.catalog_version(team)

    # When a discovery from T0 arrives late
    with pytest.raises(ConflictError):
        store.replace_catalog(team, "i-1", discovered(5, T0, "old"))

    # Then the newer catalog stays, the version did not move and nothing was left behind
    loaded = store.load_catalog(team)
    assert labels_of(loaded) == {"new"}
    assert loaded.installations[0].discovered_at == T0 + timedelta(hours=1)
    assert store.catalog_version(team) == version
    assert part_items(dynamodb, catalog_table, team) == parts_before


def test_replace_for_a_removed_installation_is_not_found(
    store: DynamoCatalogStore, dynamodb: DynamoDBClient, catalog_table: str, team: str
) -> None:
    # Given no installation / When a discovery result is stored / Then NotFound and no orphan parts
    with pytest.raises(NotFound):
        store.replace_catalog(team, "i-gone", discovered(2, T0))
    assert raw_items(dynamodb, catalog_table, team) == []


def test_big_catalog_is_split_in_parts_and_round_trips(
    store: DynamoCatalogStore, dynamodb: DynamoDBClient, catalog_table: str, team: str
) -> None:
    # Given 1,500 tools whose descriptions do not compress (well over DynamoDB's 400 KB item limit)
    store.add_installation(remote(team, "i-big", "big"))
    big = discovered(1500, T0, "big", noise_bytes=200, seed=7)

    # When the catalog is stored and loaded
    store.replace_catalog(team, "i-big", big)
    loaded = store.load_catalog(team)

    # Then it was split into several parts, none above the limit, and every tool came back
    parts = part_items(dynamodb, catalog_table, team)
    assert len(parts) >= 2
    assert all(len(p["data"]["B"]) <= PART_BYTES for p in parts)
    assert loaded.installations[0].tools == big.tools


def test_set_status_is_conditional(store: DynamoCatalogStore, team: str) -> None:
    # Given an installation that was never discovered (status changed at add time, i.e. now)
    store.add_installation(remote(team, "i-1", "github"))
    later = soon()
    version = store.catalog_version(team)

    # When the stored status is not among the expected ones
    with pytest.raises(ConflictError):
        store.set_status(team, "i-1", InstallationStatus(Status.DISCOVERING, later), expected={Status.ONLINE})
    # And when nothing is expected at all
    with pytest.raises(ConflictError):
        store.set_status(team, "i-1", InstallationStatus(Status.DISCOVERING, later), expected=())
    assert store.catalog_version(team) == version

    # When it is among them, with an error message
    failing = InstallationStatus(Status.ERROR, later, last_error="timed out after 30 s", failure_kind="timeout")
    store.set_status(team, "i-1", failing, expected={Status.NEVER, Status.OFFLINE})

    # Then the status, error and kind are stored and the version moved
    entry = store.load_catalog(team).by_slug("github")
    assert entry.status == failing
    assert store.catalog_version(team) == version + 1

    # When a write carries an older changed_at
    with pytest.raises(ConflictError):
        store.set_status(team, "i-1", InstallationStatus(Status.ONLINE, later - timedelta(seconds=1)))

    # Then nothing changed; a write at the same moment with no error clears the error fields
    assert store.load_catalog(team).by_slug("github").status == failing
    store.set_status(team, "i-1", InstallationStatus(Status.OFFLINE, later), expected=[Status.ERROR])
    assert store.load_catalog(team).by_slug("github").status == InstallationStatus(Status.OFFLINE, later)


def test_set_status_of_a_missing_installation_is_not_found(store: DynamoCatalogStore, team: str) -> None:
    # Given no installation / When a status is set / Then NotFound, with or without expectations
    with pytest.raises(NotFound):
        store.set_status(team, "i-missing", InstallationStatus(Status.ONLINE, T0))
    with pytest.raises(NotFound):
        store.set_status(team, "i-missing", InstallationStatus(Status.ONLINE, T0), expected={Status.NEVER})


def test_remove_clears_every_item(dynamodb: DynamoDBClient, catalog_table: str, team: str) -> None:
    # Given an installation with a multi-part catalog, a second one, and a stray part left by a crashed writer
    store = DynamoCatalogStore(catalog_table, dynamodb, part_bytes=2048)
    store.add_installation(remote(team, "i-1", "github", user_id="u1"))
    store.add_installation(remote(team, "i-2", "gitlab"))
    store.replace_catalog(team, "i-1", discovered(40, T0, noise_bytes=64))
    store.replace_catalog(team, "i-1", discovered(40, T0 + timedelta(seconds=1), noise_bytes=64))
    dynamodb.put_item(
        TableName=catalog_table,
        Item={
            "pk": {"S": f"TEAM#{team}"},
            "sk": {"S": "INST#i-1#CAT#crashed#0000"},
            "kind": {"S": "catalog_part"},
            "installation_id": {"S": "i-1"},
            "gen": {"S": "crashed"},
            "part": {"N": "0"},
            "data": {"B": b"x"},
            "written_at": {"S": T0.isoformat()},
        },
    )
    assert len(part_items(dynamodb, catalog_table, team)) > 2

    # When the first installation is removed, twice
    store.remove_installation(team, "i-1")
    version = store.catalog_version(team)
    store.remove_installation(team, "i-1")

    # Then only the second installation, its slug guard and the version item remain; the slug is free again
    remaining = sorted(i["sk"]["S"] for i in raw_items(dynamodb, catalog_table, team))
    assert remaining == ["INST#i-2", "SLUG#*#gitlab", "VERSION"]
    assert store.catalog_version(team) == version
    store.add_installation(remote(team, "i-3", "github", user_id="u1"))


def test_reader_never_returns_a_catalog_with_missing_parts(
    dynamodb: DynamoDBClient, catalog_table: str, team: str
) -> None:
    # Given a multi-part catalog whose second part has vanished
    store = DynamoCatalogStore(catalog_table, dynamodb, part_bytes=1024, read_attempts=3)
    store.add_installation(remote(team, "i-1", "github"))
    store.replace_catalog(team, "i-1", discovered(20, T0, noise_bytes=64))
    second = sorted(p["sk"]["S"] for p in part_items(dynamodb, catalog_table, team))[1]
    dynamodb.delete_item(TableName=catalog_table, Key={"pk": {"S": f"TEAM#{team}"}, "sk": {"S": second}})

    # When the team is loaded / Then the store refuses to return a partial catalog
    with pytest.raises(StoreError, match="changed during each of 3 reads"):
        store.load_catalog(team)


def test_teams_are_isolated(store: DynamoCatalogStore, dynamodb: DynamoDBClient, catalog_table: str, team: str) -> None:
    # Given team A with an installation and a catalog
    other = f"{team}-b"
    store.add_installation(remote(team, "i-1", "github"))
    store.replace_catalog(team, "i-1", discovered(3, T0, "a"))

    # When team B looks, then adds the same id and slug and changes it
    assert store.load_catalog(other).installations == ()
    assert store.catalog_version(other) == 0
    store.add_installation(remote(other, "i-1", "github"))
    store.set_status(other, "i-1", InstallationStatus(Status.OFFLINE, soon()))
    store.remove_installation(other, "i-1")

    # Then team A's installation, catalog and version are untouched
    loaded = store.load_catalog(team)
    assert [e.installation.team_id for e in loaded.installations] == [team]
    assert labels_of(loaded) == {"a"}
    assert loaded.installations[0].status.status is Status.ONLINE
    assert loaded.version == 2
    assert all(i["pk"]["S"] == f"TEAM#{team}" for i in raw_items(dynamodb, catalog_table, team))


def test_status_round_trips_discovery_state_class_and_suggestion(store: DynamoCatalogStore, team: str) -> None:
    # Given an installation that was discovered once
    store.add_installation(remote(team, "i-1", "github"))
    assert store.load_catalog(team).by_slug("github").status.discovery is DiscoveryState.NEVER
    store.replace_catalog(team, "i-1", discovered(2, T0))
    assert store.load_catalog(team).by_slug("github").status.discovery is DiscoveryState.SUCCESS

    # When a classified failure is recorded for its current configuration
    failure = InstallationStatus(
        Status.ERROR,
        soon(),
        last_error="github: upstream rejected the credentials with HTTP 401",
        failure_kind="auth",
        discovery=DiscoveryState.FAILED,
        error_class=ErrorClass.NEEDS_USER_ACTION,
        suggestion="authentication failed: check the token/headers",
    )
    store.set_status(team, "i-1", failure, config_hash=REMOTE_HASH)

    # Then every field comes back and the last good tools are kept
    entry = store.load_catalog(team).by_slug("github")
    assert entry.status == failure
    assert len(entry.tools) == 2

    # When a later discovery succeeds
    store.replace_catalog(team, "i-1", discovered(3, T0 + timedelta(minutes=1)))

    # Then it is online with discovery success and no error, class or suggestion left
    status = store.load_catalog(team).by_slug("github").status
    assert (status.status, status.discovery) == (Status.ONLINE, DiscoveryState.SUCCESS)
    assert (status.last_error, status.failure_kind, status.error_class, status.suggestion) == (None, None, None, None)


def test_outcomes_for_an_older_configuration_are_not_stored(store: DynamoCatalogStore, team: str) -> None:
    # Given an online installation whose configuration then changed (a new hash)
    store.add_installation(remote(team, "i-1", "github"))
    store.replace_catalog(team, "i-1", discovered(2, T0, "old-config"))
    changed = Installation(
        installation_id="i-1",
        team_id=team,
        slug="github",
        transport=Transport.STREAMABLE_HTTP,
        url="https://mcp.example.com/v2/mcp",
    )
    store.update_installation(changed)
    version = store.catalog_version(team)

    # When a discovery of the old configuration finishes, successfully or not
    with pytest.raises(ConflictError, match="configured with hash"):
        store.replace_catalog(team, "i-1", discovered(5, T0 + timedelta(hours=1), "late", config_hash=REMOTE_HASH))
    offline = InstallationStatus(Status.OFFLINE, soon(), "refused", "unreachable", DiscoveryState.FAILED)
    with pytest.raises(ConflictError, match="older configuration"):
        store.set_status(team, "i-1", offline, config_hash=REMOTE_HASH)

    # Then neither was stored; an outcome for the current hash is
    entry = store.load_catalog(team).by_slug("github")
    assert labels_of(store.load_catalog(team)) == {"old-config"}
    assert entry.status.status is Status.ONLINE
    assert store.catalog_version(team) == version
    store.replace_catalog(
        team, "i-1", discovered(1, T0 + timedelta(hours=2), "new-config", config_hash=changed.config_hash)
    )
    assert labels_of(store.load_catalog(team)) == {"new-config"}


def test_only_one_discovery_claim_per_hash_is_live(store: DynamoCatalogStore, team: str) -> None:
    # Given a new installation
    store.add_installation(remote(team, "i-1", "github"))
    now = soon()

    # When one discovery claims it
    store.claim_discovery(
        team, "i-1", REMOTE_HASH, status=Status.DISCOVERING, claimed_at=now, lease_until=now + timedelta(minutes=2)
    )

    # Then it is discovering, and a second claim of the same hash is refused while the lease lasts
    status = store.load_catalog(team).by_slug("github").status
    assert (status.status, status.discovery) == (Status.DISCOVERING, DiscoveryState.DISCOVERING)
    with pytest.raises(ConflictError, match="already running"):
        store.claim_discovery(
            team,
            "i-1",
            REMOTE_HASH,
            status=Status.DISCOVERING,
            claimed_at=now + timedelta(seconds=1),
            lease_until=now + timedelta(minutes=3),
        )
    # And a claim for another configuration hash is refused: the installation is not configured with it
    with pytest.raises(ConflictError, match="configured with hash"):
        store.claim_discovery(
            team,
            "i-1",
            "another-hash",
            status=Status.DISCOVERING,
            claimed_at=now + timedelta(seconds=1),
            lease_until=now + timedelta(minutes=3),
        )
    # And claiming a missing installation is NotFound
    with pytest.raises(NotFound):
        store.claim_discovery(team, "i-gone", REMOTE_HASH, status=Status.DISCOVERING, claimed_at=now, lease_until=now)


def test_claim_is_released_by_an_outcome_or_its_lease(store: DynamoCatalogStore, team: str) -> None:
    # Given two installations claimed for discovery, one with a lease that already ended
    store.add_installation(remote(team, "i-1", "github"))
    store.add_installation(remote(team, "i-2", "gitlab"))
    now = soon()
    store.claim_discovery(
        team, "i-1", REMOTE_HASH, status=Status.DISCOVERING, claimed_at=now, lease_until=now + timedelta(minutes=5)
    )
    store.claim_discovery(team, "i-2", REMOTE_HASH, status=Status.DISCOVERING, claimed_at=now, lease_until=T0)

    # When the first records a failure, and the second's lapsed claim is taken over
    failed = InstallationStatus(Status.OFFLINE, now, "refused", "unreachable", DiscoveryState.FAILED)
    store.set_status(team, "i-1", failed, config_hash=REMOTE_HASH)
    later = now + timedelta(seconds=1)
    store.claim_discovery(
        team, "i-2", REMOTE_HASH, status=Status.DISCOVERING, claimed_at=later, lease_until=later + timedelta(minutes=5)
    )

    # Then the first can be claimed again, keeping its offline status and error until the next outcome
    store.claim_discovery(
        team, "i-1", REMOTE_HASH, status=Status.OFFLINE, claimed_at=later, lease_until=later + timedelta(minutes=5)
    )
    status = store.load_catalog(team).by_slug("github").status
    assert (status.status, status.discovery, status.last_error) == (
        Status.OFFLINE,
        DiscoveryState.DISCOVERING,
        "refused",
    )


def test_claim_is_refused_when_the_hash_was_discovered_since(store: DynamoCatalogStore, team: str) -> None:
    # Given an installation discovered at T0 + 1 h
    store.add_installation(remote(team, "i-1", "github"))
    store.replace_catalog(team, "i-1", discovered(2, T0 + timedelta(hours=1)))
    now = soon()

    # When a request made before that discovery claims it / Then it is refused: the discovery already answered it
    with pytest.raises(ConflictError, match="already discovered"):
        store.claim_discovery(
            team,
            "i-1",
            REMOTE_HASH,
            status=Status.ONLINE,
            claimed_at=now,
            lease_until=now + timedelta(minutes=1),
            not_discovered_since=T0,
        )
    # And a request made after it may claim, leaving the installation online (it keeps serving)
    store.claim_discovery(
        team,
        "i-1",
        REMOTE_HASH,
        status=Status.ONLINE,
        claimed_at=now,
        lease_until=now + timedelta(minutes=1),
        not_discovered_since=T0 + timedelta(hours=2),
    )
    entry = store.load_catalog(team).by_slug("github")
    assert (entry.status.status, entry.status.discovery, entry.serves) == (
        Status.ONLINE,
        DiscoveryState.DISCOVERING,
        True,
    )


def test_team_ids_lists_every_team_with_a_catalog(store: DynamoCatalogStore, team: str) -> None:
    # Given two teams with installations
    store.add_installation(remote(team, "i-1", "github"))
    store.add_installation(remote(f"{team}-b", "i-1", "github"))

    # When teams are listed / Then both are among them
    assert {team, f"{team}-b"} <= set(store.team_ids())
