"""Rate and concurrency limits on the engine: attempts at a dependency are spaced out by its
rate and capped by its slots, shared by the runs of every worker; a run that has to wait is
handed back with no attempt spent."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from datetime import datetime

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.resilience import Dependency
from durably.testing import FakeClock

from .conftest import attempts_of, data, events, settle

WAIT = 30.0  # seconds: generous, for a loaded machine; nothing here is timed


def test_a_rate_limit_spaces_attempts_out(app: durably.App, clock: FakeClock) -> None:
    app.dependency("sms", Dependency(breaker=None, rate=1.0, burst=1))
    sent: list[datetime] = []

    @app.step(dependency="sms")
    async def send(text: str) -> None:
        sent.append(clock.now())

    @app.workflow
    async def notify(text: str) -> None:
        await send(text)

    for n in range(4):
        app.start(notify, f"hello {n}")
    settle(app, clock)

    assert len(sent) == 4
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sent)]
    assert all(gap >= 1.0 for gap in gaps), gaps
    waits = [
        e for run in app.client.runs().runs for e in events(app, run.id, EventKind.STEP_WAITING)
    ]
    assert waits
    assert {data(e)["waiting"] for e in waits} == {"rate limit"}
    assert all(attempts_of(app, run.id) == 1 for run in app.client.runs().runs)


def test_a_concurrency_limit_caps_attempts_in_flight(app: durably.App, clock: FakeClock) -> None:
    app.dependency("warehouse", Dependency(breaker=None, concurrency=2))
    in_flight = 0
    peak = 0
    both_in = threading.Event()  # the limit reached: two attempts in flight at once

    @app.step(dependency="warehouse", timeout="5s")
    async def pick(item: str) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 2:
            both_in.set()
        # the first attempt stays in flight until a second is let in beside it: any more
        # that the limit wrongly let in would come in meanwhile too
        assert await asyncio.to_thread(both_in.wait, WAIT)
        in_flight -= 1
        return f"picked {item}"

    @app.workflow
    async def fulfil(item: str) -> str:
        result: str = await pick(item)
        return result

    for n in range(6):
        app.start(fulfil, f"item-{n}")
    settle(app, clock)

    assert all(run.status is RunStatus.COMPLETED for run in app.client.runs().runs)
    assert peak == 2
    waits = [
        e for run in app.client.runs().runs for e in events(app, run.id, EventKind.STEP_WAITING)
    ]
    assert {data(e)["waiting"] for e in waits} == {"concurrency limit"}
    assert json.loads(app.store.gates()["warehouse"])["in_flight"] == {}


def test_a_keyed_limit_gives_each_account_its_own_rate(app: durably.App, clock: FakeClock) -> None:
    app.dependency("partner", Dependency(breaker=None, rate=1.0, burst=1))
    sent: dict[str, list[datetime]] = {}

    @app.step(dependency="partner", dependency_key=lambda account, text: account)
    async def call(account: str, text: str) -> None:
        sent.setdefault(account, []).append(clock.now())

    @app.workflow
    async def sync(account: str, text: str) -> None:
        await call(account, text)

    for n in range(3):
        app.start(sync, "acct-a", f"a{n}")
        app.start(sync, "acct-b", f"b{n}")
    settle(app, clock)

    # One call a second for each account, not for both together: the two go side by side.
    for times in sent.values():
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert len(times) == 3
        assert all(gap >= 1.0 for gap in gaps), gaps
    assert sent["acct-a"][0] == sent["acct-b"][0]
    assert sorted(app.store.gates()) == ["partner[acct-a]", "partner[acct-b]"]
    waits = [
        e for run in app.client.runs().runs for e in events(app, run.id, EventKind.STEP_WAITING)
    ]
    assert {data(e)["dependency"] for e in waits} == {"partner[acct-a]", "partner[acct-b]"}
