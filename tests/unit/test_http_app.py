from __future__ import annotations

import json

from fastapi.testclient import TestClient

from satellite.config import Settings
from satellite.http_app import create_app
from satellite.installations import InstallationService
from satellite.router import Router
from tests.unit.fakes import MemoryStore


class NoQueue:
    def send(self, request: object) -> None:
        raise AssertionError("nothing is queued in this test")


class NoMetadata:
    def remove_installation(self, team_id: str, installation_id: str) -> None:
        raise AssertionError("nothing is removed in this test")

    def token_savings(self, team_id: str) -> dict[str, object]:
        return {}


def client(status_route: bool) -> TestClient:
    settings = Settings.from_environment(
        {
            "SATELLITE_TOKENS": json.dumps({"t": {"team": "t1"}}),
            "SATELLITE_STATUS_ROUTE": "on" if status_route else "off",
        }
    )
    store = MemoryStore()
    app = create_app(Router(store, {}), InstallationService(store, NoQueue(), NoMetadata()), settings)
    return TestClient(app, headers={"Authorization": "Bearer t"})


def test_the_debug_status_route_exists_only_when_turned_on() -> None:
    assert client(status_route=False).get("/api/status").status_code == 404
    on = client(status_route=True).get("/api/status")
    assert on.status_code == 200 and on.json()["team"] == "t1"


def test_the_status_page_is_served_without_data_and_reads_the_api_with_a_token() -> None:
    page = client(status_route=False).get("/", headers={"Authorization": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'fetch(path, {headers: {Authorization: "Bearer "' in page.text
    assert "/api/installations" in page.text and "/api/tokens" in page.text
