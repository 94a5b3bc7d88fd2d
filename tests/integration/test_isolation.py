"""Runs taken over from a dead worker run alone, one after another, until each gets past the
point where that worker died; then they go on together."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import durably
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, dead_worker


def test_suspects_run_alone_then_together(app: durably.App, clock: FakeClock) -> None:
    running: list[str] = []
    overlaps: dict[str, int] = {"first": 0, "second": 0}

    async def body(label: str, run: str) -> None:
        running.append(run)
        overlaps[label] = max(overlaps[label], len(running))
        await asyncio.sleep(0.02)
        running.remove(run)

    @app.step
    async def first(run: str) -> str:
        await body("first", run)
        return run

    @app.step
    async def second(run: str) -> str:
        await body("second", run)
        return run

    @app.workflow
    async def job(run: str) -> str:
        await first(run)
        return await second(run)  # type: ignore[no-any-return]

    ids = [f"job-{n}" for n in range(4)]
    for run_id in ids:
        app.start(job, run_id, id=run_id)
        dead_worker(app.store, clock, "job", [], unknown="first")  # died inside `first`
    clock.advance(DEAD_LEASE + timedelta(seconds=1))

    app.run_until_idle(concurrency=8)

    for run_id in ids:
        assert app.handle(run_id).result(timeout=0) == run_id
        kinds = [event.kind for event in app.history(run_id)]
        assert EventKind.RUNNING_ALONE in kinds
    assert overlaps["first"] == 1  # each suspect re-ran the step it died in alone
    assert overlaps["second"] > 1  # and then they went on together
