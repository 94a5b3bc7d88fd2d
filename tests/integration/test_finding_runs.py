"""Finding runs by what happened to them, on both stores: taken over from a dead worker,
retried, compensated; how long they took; when they started. The same filters from Python,
the command line and the HTTP API's query."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

import durably
from durably import Retry, Terminal
from durably.client.pages import RunPage
from durably.errors import PayloadError
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, dying_worker, settle
from .test_cli import durably_cli


def shop_app(app: durably.App, flaky: list[int]) -> None:
    @app.step(retry=Retry(attempts=3, initial="1s", jitter="none"))
    def charge(order: str) -> str:
        if flaky:
            flaky.pop()
            raise ConnectionError("payments reset the connection")
        return f"ch-{order}"

    @app.step
    def reserve(order: str) -> str:
        return f"res-{order}"

    @reserve.compensation
    def unreserve(order: str, reservation: str) -> None:
        return None

    @app.step
    def refuse(order: str) -> None:
        raise Terminal("card declined")

    @app.workflow
    def pay(order: str) -> str:
        return charge(order)

    @app.workflow
    def undone(order: str) -> None:
        reserve(order)
        refuse(order)

    @app.workflow
    def slow(order: str) -> str:
        durably.sleep("1h")
        return order


@pytest.fixture
def runs(app: durably.App, clock: FakeClock) -> None:
    """One run of each kind, started a minute apart: a plain one, a retried one, a
    compensated one, one taken over from a dead worker, and one that took an hour."""
    flaky: list[int] = []
    shop_app(app, flaky)
    app.start("pay", "plain", id="plain")
    settle(app, clock)
    clock.advance(60)
    flaky.append(1)
    app.start("pay", "retried", id="retried")
    settle(app, clock)
    clock.advance(60)
    app.start("undone", "undone", id="undone")
    settle(app, clock)
    clock.advance(60)
    app.start("pay", "taken", id="taken")
    dying_worker(app.store, clock, ["pay"])
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    settle(app, clock)
    clock.advance(60)
    app.start("slow", "slow", id="slow")
    settle(app, clock)


def ids(page: RunPage) -> set[str]:
    return {run.id for run in page.runs}


def test_runs_are_found_by_what_happened_to_them(
    app: durably.App, clock: FakeClock, runs: None
) -> None:
    client = app.client
    assert ids(client.runs(happened=["taken_over"])) == {"taken"}
    assert ids(client.runs(happened=["retried"])) == {"retried"}
    assert ids(client.runs(happened=["compensated"])) == {"undone"}
    assert ids(client.runs(happened=["retried", "compensated"])) == set()  # each must have
    assert ids(client.runs(slower_than="10m")) == {"slow"}
    assert ids(client.runs(since=clock.now() - timedelta(hours=2), until=clock.now())) == {
        "plain",
        "retried",
        "undone",
        "taken",
        "slow",
    }
    since = FakeClock().now() + timedelta(minutes=2)  # when the third one started
    assert ids(client.runs(since=since)) == {"undone", "taken", "slow"}
    assert ids(client.runs(until=since)) == {"plain", "retried"}
    assert ids(client.runs(happened=["retried"], status="completed", workflow="pay")) == {"retried"}

    with pytest.raises(PayloadError, match="'lost' is not what can happen to a run"):
        client.runs(happened=["lost"])
    with pytest.raises(PayloadError, match="slower_than"):
        client.runs(slower_than="ten minutes")
    with pytest.raises(PayloadError, match="must say its time zone"):
        client.runs(since=since.replace(tzinfo=None))


def test_the_command_line_finds_them_too(
    app: durably.App, store_url: str, tmp_path: Path, runs: None
) -> None:
    def listed(*options: str) -> set[str]:
        shown = durably_cli("runs", "list", "--store", store_url, "--json", *options, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        return {run["id"] for run in json.loads(shown.stdout)["runs"]}

    assert listed("--taken-over") == {"taken"}
    assert listed("--retried") == {"retried"}
    assert listed("--compensated") == {"undone"}
    assert listed("--slower-than", "10m") == {"slow"}
    assert listed("--since", "2026-01-01T00:02:00+00:00") == {"undone", "taken", "slow"}
    assert listed("--until", "2026-01-01T00:02") == {"plain", "retried"}  # UTC
    table = durably_cli("runs", "list", "--store", store_url, "--slower-than", "10m", cwd=tmp_path)
    assert "STARTED (UTC)" in table.stdout
    assert "3600.0s" in table.stdout  # how long the slow one took
    wrong = durably_cli("runs", "list", "--store", store_url, "--since", "today", cwd=tmp_path)
    assert wrong.returncode == 2
    assert "'today' is not a time like 2026-11-27" in wrong.stderr
