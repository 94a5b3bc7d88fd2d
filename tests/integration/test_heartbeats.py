"""Heartbeats of long steps: durably.heartbeat(details) as a step goes, a heartbeat_timeout
that loses an attempt whose beats stop (even though its worker is alive and renews the
lease), and the last details handed to the next attempt (durably.last_heartbeat). On both
stores; the heartbeat timeout runs on real time (a few tenths of a second)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import AttemptFailed
from durably.errors import NotInWorkflow
from durably.testing import FakeClock
from durably.views.timeline import describe_run

NO_WAIT = Retry(attempts=3, initial="0s", jitter="none")


def test_an_attempt_whose_heartbeats_stop_is_lost_and_the_next_resumes(
    app: durably.App, clock: FakeClock
) -> None:
    seen: list[Any] = []

    @app.step(heartbeat_timeout="0.3s", retry=NO_WAIT)
    async def export(rows: int) -> int:
        start = durably.last_heartbeat() or {"done": 0}
        seen.append(start)
        for done in range(start["done"], rows, 100):
            durably.heartbeat({"done": done})
            if len(seen) == 1 and done == 300:
                await asyncio.Event().wait()  # stuck: its heartbeats stop
            await asyncio.sleep(0)  # let the loop record the beat
        return rows

    @app.workflow
    async def nightly() -> int:
        return await export(1000)  # type: ignore[no-any-return]

    handle = app.start(nightly, id="hb-1")
    app.run_until_idle()  # the stuck attempt is lost after 0.3 s without a beat
    assert handle.result(timeout=0) == 1000
    assert seen == [{"done": 0}, {"done": 300}]  # the second attempt resumed part-way

    history = app.client.history("hb-1")
    [failed] = [e for e in history if e.kind is EventKind.STEP_ATTEMPT_FAILED]
    failure = read_payload(failed, AttemptFailed)
    assert failure.error.error_class == "durably.errors.HeartbeatTimeout"
    assert failure.unknown  # its effect may have happened: like a timeout
    beats = [e for e in history if e.kind is EventKind.STEP_HEARTBEAT]
    assert beats[0].data == '{"done":0}'  # the first beat of an attempt is recorded at once
    last_of_first = [e for e in beats if e.attempt == 1][-1]
    assert last_of_first.data == '{"done":300}'  # and the latest goes with its failure
    assert last_of_first.seq < failed.seq


def test_a_step_that_keeps_beating_runs_past_its_heartbeat_timeout(
    app: durably.App, clock: FakeClock
) -> None:
    @app.step(heartbeat_timeout="0.2s", retry=Retry(attempts=1))
    def encode_video(frames: int) -> int:  # a sync step, in a thread of its own
        for frame in range(frames):
            durably.heartbeat({"frame": frame})
            time.sleep(0.02)
        return frames

    @app.workflow
    async def render() -> int:
        return await encode_video(30)  # type: ignore[no-any-return]

    handle = app.start(render, id="hb-2")
    app.run_until_idle()
    assert handle.result(timeout=0) == 30  # 0.6 s in all, never 0.2 s without a beat
    run = app.client.get("hb-2")
    history = app.client.history("hb-2")
    beats = [e for e in history if e.kind is EventKind.STEP_HEARTBEAT]
    assert 1 <= len(beats) <= 8  # 30 beats, recorded at most every 0.16 s (80% of 0.2 s)
    shown = dict(describe_run(run, history))
    assert shown["heartbeat"].endswith(f"#0 encode_video attempt 1: {beats[-1].data}")


def test_runs_show_has_the_last_heartbeat_of_a_step_under_way(
    app: durably.App, clock: FakeClock
) -> None:
    @app.step(retry=Retry(attempts=2, initial="1h", jitter="none"))
    async def upload(parts: int) -> int:
        durably.heartbeat({"part": 7, "of": parts})
        raise ConnectionError("reset")

    @app.workflow
    async def backup() -> int:
        return await upload(9)  # type: ignore[no-any-return]

    app.start(backup, id="hb-3")
    app.run_until_idle()
    run = app.client.get("hb-3")
    assert run.status is RunStatus.PENDING
    shown = dict(describe_run(run, app.client.history("hb-3")))
    assert '#0 upload attempt 1: {"part":7,"of":9}' in shown["heartbeat"]
    clock.advance(timedelta(hours=1))


def test_heartbeats_belong_in_steps_and_take_json(app: durably.App, clock: FakeClock) -> None:
    with pytest.raises(NotInWorkflow):
        durably.heartbeat({"x": 1})
    with pytest.raises(NotInWorkflow):
        durably.last_heartbeat()

    @app.step(retry=Retry(attempts=1))
    async def bad() -> None:
        durably.heartbeat(object())

    @app.workflow
    async def calls_bad() -> None:
        await bad()

    @app.workflow
    async def in_workflow_code() -> None:
        durably.heartbeat()

    app.start(calls_bad, id="hb-4")
    app.start(in_workflow_code, id="hb-5")
    app.run_until_idle()
    error = app.client.get("hb-4").error
    assert error is not None
    assert "heartbeat's details" in error.message
    error = app.client.get("hb-5").error
    assert error is not None
    assert "outside a step" in error.message
    with pytest.raises(ValueError, match="heartbeat_timeout"):
        app.step(heartbeat_timeout="soon")(lambda: None)
