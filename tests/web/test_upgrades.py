"""Upgrading stranded runs through the real server: the API's POST /api/upgrade (a write
token's, dry run or not) and the workers page's two buttons in a real Chromium. The server
serves the edited code; the runs were started by the first code and left behind by it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

import durably
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Upgraded
from durably.stores.records import WorkerBeat
from durably.testing import FakeClock
from tests.integration import upgrade_app

from .conftest import Keys, Live, serving
from .test_dashboard import page, shoot  # noqa: F401  (a fixture)


@pytest.fixture
def live(store_url: str, clock: FakeClock, keys: Keys) -> Iterator[Live]:
    """Run o-1 asleep on the first code, whose worker is gone; the server runs the edit."""
    first = upgrade_app.build(durably.App(store_url, clock=clock), "first")
    first.start("order", "o-1", id="o-1")
    first.run_until_idle()
    first.close()
    clock.advance(timedelta(minutes=5))
    edited = upgrade_app.build(durably.App(store_url, clock=clock), "edited")
    now, version = clock.now(), edited.registry.workflows["order"].version
    beat = WorkerBeat("new-worker", now, now, timedelta(hours=1), {"order": (version,)})
    edited.store.beat(beat)  # a worker of the edited code runs: o-1 was left behind
    with serving(edited, keys) as running:
        yield running
    edited.close()


def test_the_api_says_what_would_move_then_moves_it(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        before = web.get("/api/runs/o-1").json()
        assert "durably upgrade" in before["next"], before  # stranded: it says how out

        refused = web.post("/api/upgrade", json={}, headers=live.headers(live.keys.read))
        assert refused.status_code == 403, refused.text
        assert web.get("/api/runs/o-1").json()["version"] == before["version"]

        dry = web.post("/api/upgrade", json={"dry_run": True})
        assert dry.status_code == 200, dry.text
        [said] = dry.json()
        assert (said["run"], said["outcome"], said["from_version"]) == (
            "o-1",
            "would move",
            before["version"],
        )
        assert web.get("/api/runs/o-1").json()["version"] == before["version"]

        unknown = web.post("/api/upgrade", json={"workflow": "nope"})
        assert unknown.status_code == 404, unknown.text
        assert "no workflow named 'nope'" in unknown.json()["message"]

        moved = web.post("/api/upgrade")  # no body: every workflow, for real
        assert [u["outcome"] for u in moved.json()] == ["moved"]
        assert web.get("/api/runs/o-1").json()["version"] == said["to_version"]
    [note] = [e for e in live.app.client.history("o-1") if e.kind is EventKind.UPGRADED]
    assert read_payload(note, Upgraded).by == "erin"  # the token's name


@pytest.mark.browser
def test_the_workers_page_checks_then_moves_them(live: Live, page: Any) -> None:  # noqa: F811
    page.goto(f"{live.url}/workers")
    page.get_by_test_id("upgrade-check").click()
    said = page.locator(".said").inner_text()
    assert said.startswith("1 run(s) would move to the deployed code")
    assert live.app.client.get("o-1").version != live.app.registry.workflows["order"].version
    shoot(page, "workers-upgrade")

    page.get_by_test_id("upgrade-move").click()
    assert page.locator(".said").inner_text().startswith("1 run(s) moved to the deployed code")
    assert live.app.client.get("o-1").version == live.app.registry.workflows["order"].version
