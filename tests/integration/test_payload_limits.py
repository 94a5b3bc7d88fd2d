"""A payload over the app's size limit (App(max_payload=), 1 MiB by default) on both stores:
refused at the door with a PayloadError that names it and what to do, storing nothing (a
run's input, a signal's data); a stored input over the limit of the workers that claim it
parks its run, and the others go on; a step result over it fails the step for good, and its
undo runs (its body ran)."""

from __future__ import annotations

import pytest

import durably
from durably import ConfigError, PayloadError, RunStatus
from durably.codec.encoding import DEFAULT_MAX_PAYLOAD
from durably.testing import FakeClock

BIG = "x" * (DEFAULT_MAX_PAYLOAD + 1)


def echo_app(app: durably.App, undone: list[str]) -> None:
    @app.step
    async def grow(size: int) -> str:
        return "y" * size

    @grow.compensation
    async def shrink(size: int, grown: str | None) -> None:
        undone.append(f"shrink {size}")

    @app.workflow(version="1")
    async def echo(text: str, size: int) -> int:
        grown: str = await grow(size)
        return len(text) + len(grown)

    @app.workflow(version="1")
    async def waiter() -> str:
        data: str = await durably.wait_for_signal("data")
        return data


def test_an_input_over_the_limit_is_refused_and_nothing_is_stored(app: durably.App) -> None:
    echo_app(app, [])
    with pytest.raises(PayloadError, match=r"the input of .* over the limit of 1,048,576"):
        app.start("echo", BIG, 0, id="big")
    assert app.client.runs().runs == []
    assert app.start("echo", "small", 0, id="small").id == "small"


def test_a_signal_over_the_limit_is_refused(app: durably.App) -> None:
    echo_app(app, [])
    app.start("waiter", id="w-1")
    app.run_until_idle()
    with pytest.raises(PayloadError, match="the data of the 'signal' message takes"):
        app.client.signal("w-1", "data", BIG, by="ops")
    app.client.signal("w-1", "data", "fine", by="ops")
    app.run_until_idle()
    assert app.handle("w-1").result(timeout=0) == "fine"


def test_a_stored_input_over_the_workers_limit_parks_only_its_run(
    app: durably.App, store_url: str, clock: FakeClock
) -> None:
    echo_app(app, [])
    app.start("echo", "z" * 5_000, 0, id="large")  # within the starter's limit
    app.start("echo", "z", 0, id="tiny")
    strict = durably.App(store_url, clock=clock, max_payload=1_000)  # the workers' limit
    try:
        echo_app(strict, [])
        strict.run_until_idle()
        assert strict.client.get("tiny").status is RunStatus.COMPLETED
        run = strict.client.get("large")
        assert run.status is RunStatus.NEEDS_ATTENTION
        assert run.error is not None
        assert "the stored input of run 'large' takes 5,02" in run.error.message
        assert "over the limit of 1,000" in run.error.message
    finally:
        strict.close()


def test_a_step_result_over_the_limit_fails_the_step_and_its_undo_runs(
    store_url: str, clock: FakeClock
) -> None:
    undone: list[str] = []
    app = durably.App(store_url, clock=clock, max_payload=10_000)
    try:
        echo_app(app, undone)
        app.start("echo", "a", 20_000, id="grown")
        app.run_until_idle()
        run = app.client.get("grown")
        assert run.status is RunStatus.FAILED
        assert run.error is not None
        assert "the result of step 'grow' takes 20,002 bytes" in run.error.message
        assert undone == ["shrink 20000"]  # its body ran: its effect is undone
    finally:
        app.close()


@pytest.mark.parametrize("limit", [0, -1, 1.5, "1MB", True])
def test_a_limit_that_is_no_number_of_bytes_is_refused(limit: object) -> None:
    with pytest.raises(ConfigError, match="max_payload is a number of bytes"):
        durably.App("sqlite:///unused.db", max_payload=limit)  # type: ignore[arg-type]
