"""Runs taken over from a dead worker run with no other run until each gets past the point
where that worker died: together at first, strictly alone once a worker died among them."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import durably
from durably.core.event_data import payload_of
from durably.core.history import Event, EventKind
from durably.core.payloads import RunningAlone
from durably.stores import Checkpoint
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import DEAD_LEASE


class _Bodies:
    """Which step bodies run at the same time."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.seen_with: dict[str, set[str]] = {}  # "run:step" -> what else ran meanwhile

    async def run(self, label: str) -> None:
        self.seen_with.setdefault(label, set()).update(self.running)
        for other in self.running:
            self.seen_with.setdefault(other, set()).add(label)
        self.running.add(label)
        await asyncio.sleep(0.02)
        self.running.discard(label)


def _app_with_two_steps(app: durably.App, bodies: _Bodies) -> None:
    @app.step
    async def first(run: str) -> str:
        await bodies.run(f"{run}:first")
        return run

    @app.step
    async def second(run: str) -> str:
        await bodies.run(f"{run}:second")
        return run

    @app.workflow
    async def job(run: str) -> str:
        await first(run)
        return await second(run)  # type: ignore[no-any-return]


def _die_in_first(app: durably.App, clock: FakeClock, *, among: int | None = None) -> str:
    """Claim the next due run as a worker that dies inside `first`; with `among`, it was
    running it with `among` other suspects when it died."""
    [claim] = app.store.claim("dead-worker", ["job"], now=clock.now(), lease=DEAD_LEASE, limit=1)
    seq, at = claim.events[-1].seq + 1, clock.now()
    events: list[Event] = []
    if among is not None:
        data = json.dumps({"reason": "a worker died while running it", "others": among})
        events.append(Event(seq, EventKind.RUNNING_ALONE, at, data=data))
    started = json.dumps(
        {"key": step_key(claim.run_id, 0, "first"), "input": {"args": [claim.run_id], "kwargs": {}}}
    )
    events.append(Event(seq + len(events), EventKind.STEP_STARTED, at, 0, "first", 1, started))
    assert app.store.commit([Checkpoint(claim.run_id, claim.epoch, tuple(events))], now=at)
    return claim.run_id


def test_suspects_run_together_with_no_other_run(app: durably.App, clock: FakeClock) -> None:
    bodies = _Bodies()
    _app_with_two_steps(app, bodies)
    suspects = [f"suspect-{n}" for n in range(3)]
    for run_id in suspects:
        app.start("job", run_id, id=run_id)
        _die_in_first(app, clock)
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    fresh = [f"fresh-{n}" for n in range(3)]
    for run_id in fresh:
        app.start("job", run_id, id=run_id)

    app.run_until_idle(concurrency=8)

    for run_id in [*suspects, *fresh]:
        assert app.handle(run_id).result(timeout=0) == run_id
    for run_id in suspects:
        alone = [
            payload_of(event)
            for event in app.client.history(run_id)
            if event.kind is EventKind.RUNNING_ALONE
        ]
        assert alone == [RunningAlone("a worker died while running it", 2)]
        company = bodies.seen_with[f"{run_id}:first"]
        assert not {label for label in company if label.startswith("fresh")}  # none beside
    assert any(bodies.seen_with[f"{run_id}:first"] for run_id in suspects)  # but together


def test_after_a_death_among_suspects_each_runs_strictly_alone(
    app: durably.App, clock: FakeClock
) -> None:
    bodies = _Bodies()
    _app_with_two_steps(app, bodies)
    suspects = [f"suspect-{n}" for n in range(3)]
    for run_id in suspects:
        app.start("job", run_id, id=run_id)
        _die_in_first(app, clock)  # the first death: with other runs
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    for _ in suspects:
        _die_in_first(app, clock, among=2)  # the second: together, among suspects only
    clock.advance(DEAD_LEASE + timedelta(seconds=1))

    app.run_until_idle(concurrency=8)

    for run_id in suspects:
        assert app.handle(run_id).result(timeout=0) == run_id
        assert bodies.seen_with.get(f"{run_id}:first", set()) == set()  # strictly alone
        assert app.client.get(run_id).status is durably.RunStatus.COMPLETED
