"""The audit trail through the one client, on both stores: each kind of person action leaves
exactly one entry naming who did it and how, an action that changes nothing leaves none, the
app's own starts are not a person's, and no payload's value ever reaches the trail."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import durably
from durably import Retry, RunStatus
from durably.core.audit import Via
from durably.runtime.upgrades import Outcome
from durably.testing import FakeClock
from tests.contract.support import execute_sql

from . import upgrade_app
from .conftest import settle
from .test_cli import durably_cli

SECRET = "4111-1111-1111-1111"  # planted in an input, a signal's data and a skipped result


def shop_app(app: durably.App, down: list[bool]) -> None:
    @app.step(retry=Retry(attempts=1))
    async def charge(card: str) -> str:
        if down:
            raise ConnectionError("payment service unreachable")
        return "ch-1"

    @app.workflow
    async def order(card: str) -> str:
        pin: Any = await durably.wait_for_signal("go")
        return f"{await charge(card)} {len(str(pin))}"

    @app.workflow
    async def refund(order: str) -> bool:
        decision = await durably.approval("refund")
        return bool(decision.approved)


def entries(app: durably.App, **filters: Any) -> list[tuple[str, str, str, str | None]]:
    page = app.client.audit(limit=1000, **filters)
    return [(e.action, e.by, e.via, e.run_id) for e in reversed(page.entries)]


def test_each_person_action_leaves_exactly_one_entry(app: durably.App, clock: FakeClock) -> None:
    down = [True]
    shop_app(app, down)
    client = app.client
    app.start("order", SECRET, id="quiet")  # the app's own start: its work, not a person's
    client.start("order", [SECRET], id="o-1", by="erin")
    client.start("order", [SECRET], id="o-1", by="erin")  # found: nothing started
    client.pause("o-1", by="sam", reason="checking the card")
    app.run_until_idle()
    client.pause("o-1", by="sam")  # paused already: nothing done, no entry
    client.resume("o-1", by="sam")
    client.signal("o-1", "go", {"pin": SECRET}, by="erin")
    settle(app, clock)
    assert client.get("o-1").status is RunStatus.NEEDS_ATTENTION
    client.retry("o-1", by="erin")
    settle(app, clock)
    client.skip_step("o-1", by="erin", result=SECRET)
    settle(app, clock)
    assert client.get("o-1").status is RunStatus.COMPLETED

    client.start("order", [SECRET], id="o-2", by="erin")
    client.signal("o-2", "go", SECRET, by="erin")
    settle(app, clock)
    client.fail("o-2", by="sam", reason="card stolen")
    settle(app, clock)
    down.clear()
    restarted = client.restart("o-2", by="erin")
    client.start("order", [SECRET], id="o-3", by="erin")
    client.cancel("o-3", by="sam", reason="duplicate")
    client.start("refund", ["o-1"], id="r-1", by="erin")
    client.start("refund", ["o-2"], id="r-2", by="erin")
    settle(app, clock)
    client.decide("r-1", "refund", approved=True, by="boss", comment="fine")
    client.decide("r-2", "refund", approved=False, by="boss")
    settle(app, clock)

    trail = entries(app)
    assert Counter(action for action, *_ in trail) == {
        "start": 5,
        "pause": 1,
        "resume": 1,
        "signal": 2,
        "retry": 1,
        "skip": 1,
        "fail": 1,
        "restart": 1,
        "cancel": 1,
        "approve": 1,
        "reject": 1,
    }
    assert {via for *_, via, _ in trail} == {"library"}
    assert entries(app, run_id="o-1") == [
        ("start", "erin", "library", "o-1"),
        ("pause", "sam", "library", "o-1"),
        ("resume", "sam", "library", "o-1"),
        ("signal", "erin", "library", "o-1"),
        ("retry", "erin", "library", "o-1"),
        ("skip", "erin", "library", "o-1"),
    ]
    assert [a for a, *_ in entries(app, run_id="o-2")] == ["start", "signal", "fail", "restart"]
    assert [(a, by) for a, by, *_ in entries(app, by="boss")] == [
        ("approve", "boss"),
        ("reject", "boss"),
    ]
    assert entries(app, run_id=restarted.id) == []  # the restart is an action on o-2
    assert entries(app, run_id="quiet") == []
    page = app.client.audit(limit=100, run_id="o-2")
    assert restarted.id in str(page.entries[0].detail)


def test_no_payload_value_reaches_the_trail(
    app: durably.App, clock: FakeClock, store_url: str
) -> None:
    down = [True]
    shop_app(app, down)
    client = app.client
    client.start("order", [SECRET], id="o-1", by="erin")
    client.signal("o-1", "go", {"pin": SECRET}, by="erin")
    settle(app, clock)
    client.skip_step("o-1", by="erin", result=SECRET)
    settle(app, clock)
    assert SECRET in client.get("o-1").input  # it is in the store: in the run, not the trail

    rows = execute_sql(store_url, "SELECT * FROM durably_audit")  # every column, as stored

    assert len(rows) == 3
    assert not [row for row in rows if SECRET in repr(row)]


def test_the_cli_records_its_user_and_lists_the_trail(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    shop_app(app, [])
    app.client.start("order", [SECRET], id="o-1", by="erin")
    store = ["--store", store_url]

    cancelled = durably_cli("cancel", "o-1", "--by", "sam", *store, cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr

    listed = durably_cli("audit", "--by", "sam", "--since", "1h", *store, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [header, row] = listed.stdout.splitlines()
    assert header.split()[:5] == ["AT", "(UTC)", "BY", "ACTION", "VIA"]
    assert row.split()[2:6] == ["sam", "cancel", "cli", "o-1"]
    assert "reason" not in row  # none given

    as_json = durably_cli("audit", "--run", "o-1", "--json", "--limit", "1", *store, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert '"action": "cancel"' in as_json.stdout
    assert '"next_cursor": "' in as_json.stdout  # the start is on the next page

    wrong = durably_cli("audit", "--since", "yesterday", *store, cwd=tmp_path)
    assert wrong.returncode == 2
    assert "neither a duration back from now" in wrong.stderr


def test_schedule_actions_and_upgrades_are_in_the_trail(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    @app.schedule(every="1h")
    @app.workflow
    async def sweep() -> None:
        pass

    app.run_until_idle()  # the schedule is registered
    schedules = app.schedules
    schedules.pause("sweep", by="sam", via=Via.API)
    schedules.resume("sweep", by="sam", via=Via.DASHBOARD)
    triggered = schedules.trigger("sweep", by="erin", via=Via.CLI)
    schedules.trigger("sweep")  # the code's own: not a person's
    start = clock.now() - timedelta(hours=3)
    backfilled = schedules.backfill("sweep", start, clock.now(), by="erin", via=Via.CLI)
    assert len(backfilled) == 4  # both ends included

    upgrade_app.build(other_app, "first")
    other_app.start("order", "o-9", id="o-9")
    other_app.run_until_idle()
    clock.advance(timedelta(minutes=5))  # its worker gone: the run is stranded
    edited = upgrade_app.build(durably.App(app.store, clock=clock), "edited")
    [moved] = edited.upgrade(by="ada", via=Via.CLI)
    assert moved.outcome is Outcome.MOVED
    edited.upgrade(by="ada", via=Via.CLI)  # nothing stranded any more: no entry

    assert entries(app) == [
        ("pause_schedule", "sam", "api", None),
        ("resume_schedule", "sam", "dashboard", None),
        ("trigger_schedule", "erin", "cli", triggered),
        ("backfill_schedule", "erin", "cli", None),
        ("upgrade", "ada", "cli", "o-9"),
    ]
    [upgraded] = app.client.audit(limit=1, run_id="o-9").entries
    assert json.loads(upgraded.detail or "{}") == {
        "from": moved.from_version,
        "to": moved.to_version,
    }
