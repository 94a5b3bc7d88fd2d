"""Waits at a gate that cost nothing: a run behind a probe in flight, or behind a full
concurrency limit, is handed back until the gate's hold would run out, and woken as soon as
the probe reports back or the slot is given back, not when its due time comes."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.resilience import Breaker, Dependency, GateState
from durably.testing import FakeClock

from .conftest import data, events, gate

WAIT = 30.0  # seconds: generous, for a loaded machine; nothing here is timed


def set_gate(app: durably.App, name: str, state: GateState) -> None:
    """Leave a gate in `state`, as other workers would have."""
    app.store.update_gate(name, lambda _: (state.dump(), None))


def probed_app(app: durably.App, probing: threading.Event, answer: threading.Event) -> None:
    """A payments service whose probe call (order "probe") sets `probing` once it is under
    way (let through the gate, which the store now holds half open), then hangs until `answer`
    is set."""
    app.dependency("pay", Dependency(breaker=Breaker(threshold=3, cooldown="30s")))

    @app.step(dependency="pay", timeout="15m")
    async def charge(order: str) -> str:
        if order == "probe":
            probing.set()
            assert await asyncio.to_thread(answer.wait, WAIT)
        return f"ch-{order}"

    @app.workflow
    async def checkout(order: str) -> str:
        result: str = await charge(order)
        return result


def test_a_run_behind_a_probe_in_flight_waits_quietly_and_is_woken_when_it_ends(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    probing, answer = threading.Event(), threading.Event()
    probed_app(app, probing, answer)
    probed_app(other_app, probing, answer)
    # the breaker opened a minute ago: its cooldown is over, the next attempt is the probe
    set_gate(app, "pay", GateState(breaker="open", opened_at=clock.now().timestamp() - 60))
    start = clock.now()
    other_app.start("checkout", "probe", id="probe")
    # another worker sends the probe; its call hangs (a lease long enough for the test)
    prober = threading.Thread(target=lambda: other_app.run_until_idle(lease="1h"))
    prober.start()
    try:
        assert probing.wait(WAIT), "the probe did not go out"
        assert gate(app, "pay").breaker == "half_open"
        app.start("checkout", "queued", id="queued")
        app.run_until_idle()
        assert app.client.get("queued").available_at == start + timedelta(minutes=15)  # its hold

        for _ in range(20):  # ten minutes pass, in which workers look for due runs
            clock.advance("30s")
            app.run_until_idle()
        kinds = [str(e.kind) for e in events(app, "queued")]
        assert kinds == ["run_started", "claimed", "step_waiting"]  # nobody looked again
        assert app.client.get("queued").status is RunStatus.PENDING
    finally:
        answer.set()  # the probe succeeds
        prober.join(timeout=WAIT)
    assert not prober.is_alive()
    app.run_until_idle()

    assert app.handle("queued").result(timeout=0) == "ch-queued"
    history = events(app, "queued")
    assert [str(e.kind) for e in history] == [
        "run_started",
        "claimed",
        "step_waiting",
        "claimed",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    woken_at = history[3].at
    assert woken_at == start + timedelta(minutes=10) == clock.now()  # not at its due time
    due = start + timedelta(minutes=15)  # recorded as due then; woken before, by the gate
    assert data(history[2]) == {
        "waiting": "breaker open",
        "dependency": "pay",
        "until": due.isoformat(),
    }
    state = gate(app, "pay")
    assert (state.breaker, state.waiting) == ("closed", {})


async def until_waiting(app: durably.App, run_id: str) -> None:
    """In a step body: wait (as a long call would) until `run_id` has handed itself back to
    wait at a gate."""
    deadline = time.monotonic() + WAIT
    while True:
        history = await asyncio.to_thread(app.client.history, run_id)
        run = await asyncio.to_thread(app.client.get, run_id)
        waiting = any(e.kind is EventKind.STEP_WAITING for e in history)
        if waiting and run.status is RunStatus.PENDING:
            return
        assert time.monotonic() < deadline, f"{run_id} did not wait"
        await asyncio.sleep(0.01)


def test_runs_behind_a_full_concurrency_limit_are_woken_in_turn_as_the_slot_frees(
    app: durably.App, clock: FakeClock
) -> None:
    app.dependency("warehouse", Dependency(breaker=None, concurrency=1))
    picked: list[str] = []

    @app.step(dependency="warehouse", timeout="10m")
    async def pick(item: str) -> str:
        if item == "first":  # while it holds the slot, three runs queue for it, in turn
            for n in range(3):
                await app.start_async(fulfil, f"item-{n}", id=f"item-{n}")
                await until_waiting(app, f"item-{n}")
        picked.append(item)
        return f"picked {item}"

    @app.workflow
    async def fulfil(item: str) -> str:
        result: str = await pick(item)
        return result

    start = clock.now()
    app.start(fulfil, "first", id="first")
    app.run_until_idle()  # the clock stands still: nobody waits for a slot's hold to run out

    assert picked == ["first", "item-0", "item-1", "item-2"]
    assert clock.now() == start
    for n in range(3):
        assert app.handle(f"item-{n}").result(timeout=0) == f"picked item-{n}"
        history = events(app, f"item-{n}")
        assert [str(e.kind) for e in history] == [
            "run_started",
            "claimed",
            "step_waiting",
            "claimed",
            "step_started",
            "step_completed",
            "run_completed",
        ]
        assert data(history[2])["waiting"] == "concurrency limit"
    state = gate(app, "warehouse")
    assert (state.in_flight, state.waiting) == ({}, {})
