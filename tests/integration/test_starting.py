"""Starting runs: ids are idempotent, conflicts are explained, unknown workflows wait."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

import durably
from durably.testing import FakeClock

from .conftest import kinds


def register_double(app: durably.App) -> durably.Workflow:
    @app.workflow
    async def double(x: int) -> int:
        return 2 * x

    return double


def test_starting_the_same_id_twice_returns_the_same_run(app: durably.App) -> None:
    double = register_double(app)
    first = app.start(double, 21, id="a")
    second = app.start(double, 21, id="a")

    assert first.id == second.id == "a"
    assert [run.id for run in app.client.runs().runs] == ["a"]
    assert kinds(app.client.history("a")) == ["run_started"]
    assert app.run_until_idle() == 1
    assert app.start(double, 21, id="a").result(timeout=0) == 42  # even once it has ended
    assert len(app.client.runs().runs) == 1


def test_a_different_input_for_the_same_id_is_a_conflict(app: durably.App) -> None:
    double = register_double(app)
    app.start(double, 21, id="a")
    with pytest.raises(durably.RunConflict) as conflict:
        app.start(double, 22, id="a")
    message = str(conflict.value)
    assert "'a' already exists with a different input" in message
    assert "[21]" in message
    assert "[22]" in message
    assert "app.handle(id)" in message
    assert [run.id for run in app.client.runs().runs] == ["a"]
    assert app.run_until_idle() == 1
    assert app.handle("a").result(timeout=0) == 42  # the first input won


def test_a_different_workflow_for_the_same_id_is_a_conflict(app: durably.App) -> None:
    double = register_double(app)

    @app.workflow
    async def triple(x: int) -> int:
        return 3 * x

    app.start(double, 21, id="a")
    with pytest.raises(
        durably.RunConflict,
        match=r"'a' already exists with a different workflow \(workflow 'double'",
    ):
        app.start(triple, 21, id="a")
    assert [(run.id, run.workflow) for run in app.client.runs().runs] == [("a", "double")]


def test_concurrent_starts_of_one_id_make_one_run(app: durably.App) -> None:
    double = register_double(app)
    threads = 12
    ready = threading.Barrier(threads)

    def start() -> str:
        ready.wait(timeout=30)
        return app.start(double, 21, id="same").id

    with ThreadPoolExecutor(threads) as pool:
        ids = list(pool.map(lambda _: start(), range(threads)))

    assert ids == ["same"] * threads
    assert [run.id for run in app.client.runs().runs] == ["same"]
    assert kinds(app.client.history("same")) == ["run_started"]
    assert app.run_until_idle() == 1
    assert app.handle("same").result(timeout=0) == 42


def test_starting_an_unregistered_workflow_is_refused(app: durably.App) -> None:
    register_double(app)
    with pytest.raises(durably.UnknownWorkflow, match=r"no workflow named 'nope'.*known: double"):
        app.start("nope", 1)
    assert app.client.runs().runs == []


def test_an_unserializable_input_is_refused_before_anything_is_stored(app: durably.App) -> None:
    double = register_double(app)
    with pytest.raises(
        durably.PayloadError, match=r"^the input of workflow 'double' cannot be stored: input.x is"
    ):
        app.start(double, object(), id="bad")
    assert app.client.runs().runs == []


def test_handle_of_an_unknown_run(app: durably.App) -> None:
    with pytest.raises(durably.RunNotFound, match="'ghost'"):
        app.handle("ghost")


def test_a_run_of_a_workflow_the_worker_does_not_know_stays_pending(
    app: durably.App,
    other_app: durably.App,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    @other_app.workflow
    async def mystery(x: int) -> int:
        return x

    @app.workflow
    async def known(x: int) -> int:
        return x

    handle = other_app.start(mystery, 1, id="m-1")
    before = other_app.client.get(handle.id)
    history = other_app.client.history(handle.id)

    with caplog.at_level(logging.WARNING, logger="durably"):
        assert app.run_until_idle() == 0
        clock.advance("1h")
        assert app.run_until_idle() == 0

    after = app.client.get(handle.id)
    assert after.status is durably.RunStatus.PENDING
    assert after == before
    assert app.client.history(handle.id) == history
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'mystery'" in message for message in warnings), warnings

    assert other_app.run_until_idle() == 1  # the app that knows it runs it
    assert handle.result(timeout=0) == 1


# -- results ------------------------------------------------------------------------------


def test_result_of_a_pending_run_times_out_naming_its_status(app: durably.App) -> None:
    handle = app.start(register_double(app), 1)
    with pytest.raises(TimeoutError, match=r"is still pending after 0s"):
        handle.result(timeout=0)
    with pytest.raises(TimeoutError, match=r"is still pending after 10ms"):
        handle.result(timeout="10ms")
    with pytest.raises(TimeoutError, match=r"is still pending"):
        handle.result(timeout=timedelta(milliseconds=5))


def test_result_of_a_failed_run_raises_workflow_failed(app: durably.App) -> None:
    @app.workflow
    async def broken(x: int) -> int:
        raise LookupError(f"no such thing: {x}")

    handle = app.start(broken, 7, id="broken-1")
    app.run_until_idle()
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    error = failed.value
    assert (error.run_id, error.status) == ("broken-1", "failed")
    assert (error.error_class, error.message) == ("LookupError", "no such thing: 7")
    assert "'broken-1' ended failed: LookupError: no such thing: 7" in str(error)
    with pytest.raises(durably.WorkflowFailed):
        handle.result()  # no timeout: the run is over, no wait
