"""Where the user's code raised: each failed attempt of a step, an undo and a workflow body
records its traceback (the user's frames), shown by `runs show --traceback`, in the history's
--json and in the worker's log at warning level, on both stores."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import durably
from durably import Retry, RunStatus, Terminal
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import data, events, settle
from .test_cli import durably_cli

THIS_FILE = str(Path(__file__).resolve())


def price_of(sku: str) -> int:
    prices = {"sku-1": 10}
    return prices[sku]  # the line a traceback must point at


def make_app(app: durably.App) -> None:
    @app.step(retry=Retry(attempts=2, initial="1s", jitter="none"))
    def charge(sku: str) -> int:
        return price_of(sku)

    @app.workflow
    def order(sku: str) -> int:
        return charge(sku)

    @app.step
    def reserve(sku: str) -> str:
        return f"res-{sku}"

    @reserve.compensation
    def unreserve(sku: str, reservation: str) -> None:
        raise Terminal(f"the warehouse lost {reservation}")

    @app.step
    def confirm(sku: str) -> None:
        raise Terminal(f"{sku} is discontinued")

    @app.workflow
    def undone(sku: str) -> None:
        reserve(sku)
        confirm(sku)

    @app.workflow
    def typo(sku: str) -> str:
        charge(sku)
        return shipping_label(sku)  # type: ignore[name-defined]  # noqa: F821


def test_each_failed_attempt_records_where_the_step_raised(
    app: durably.App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    make_app(app)
    with caplog.at_level(logging.WARNING, logger="durably.execution"):
        app.start("order", "sku-404", id="o1")
        settle(app, clock)

    assert app.client.get("o1").status is RunStatus.NEEDS_ATTENTION
    failed = events(app, "o1", EventKind.STEP_ATTEMPT_FAILED) + events(
        app, "o1", EventKind.STEP_FAILED
    )
    assert len(failed) == 2  # the first attempt, then the last
    for event in failed:
        text = data(event)["traceback"]
        assert text.startswith("Traceback (most recent call last):")
        assert f'File "{THIS_FILE}"' in text
        assert "in charge" in text
        assert "in price_of" in text
        assert "return prices[sku]" in text
        assert text.rstrip().endswith("KeyError: 'sku-404'")
        assert "durably/runtime" not in text  # the engine's frames are left out
    logged = [r.getMessage() for r in caplog.records if "step charge" in r.getMessage()]
    assert len(logged) == 2
    assert logged[0].startswith("run o1: step charge attempt 1 failed, retry at ")
    assert logged[1].startswith("run o1: step charge attempt 2 failed, gave up")
    assert all("return prices[sku]" in line for line in logged)


def test_a_failing_undo_and_a_failing_workflow_body_record_theirs(
    app: durably.App, clock: FakeClock
) -> None:
    make_app(app)
    app.start("undone", "sku-1", id="u1")
    app.start("typo", "sku-1", id="t1")
    settle(app, clock)

    assert app.client.get("u1").status is RunStatus.COMPENSATION_FAILED
    [undo] = events(app, "u1", EventKind.COMPENSATION_FAILED)
    assert "in unreserve" in data(undo)["traceback"]
    [confirm] = events(app, "u1", EventKind.STEP_FAILED)
    assert "in confirm" in data(confirm)["traceback"]

    assert app.client.get("t1").status is RunStatus.FAILED
    [failed] = events(app, "t1", EventKind.RUN_FAILED)
    text = data(failed)["traceback"]
    assert "in typo" in text
    assert "return shipping_label(sku)" in text
    assert "NameError: name 'shipping_label' is not defined" in text


def test_an_error_durably_raised_has_no_traceback(app: durably.App, clock: FakeClock) -> None:
    @app.step
    def tags() -> int:
        return "not a number"  # type: ignore[return-value]  # durably refuses to store it

    @app.workflow
    def tagged() -> None:
        tags()

    app.start("tagged", id="g1")
    settle(app, clock)
    [failed] = events(app, "g1", EventKind.STEP_FAILED)
    assert data(failed)["error_class"] == "durably.errors.PayloadError"
    assert "traceback" not in data(failed)


def test_runs_show_prints_them_on_asking(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    make_app(app)
    app.start("order", "sku-404", id="o1")
    settle(app, clock)

    plain = durably_cli("runs", "show", "o1", "--store", store_url, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "(where it raised: durably runs show o1 --traceback)" in plain.stdout
    assert "Traceback" not in plain.stdout

    shown = durably_cli("runs", "show", "o1", "--traceback", "--store", store_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    after = shown.stdout.split("attempt_failed #0 charge, attempt 1:\n", 1)[1]
    assert after.startswith("Traceback (most recent call last):")
    assert "return prices[sku]" in after
    assert "step_failed #0 charge, attempt 2:" in after

    as_json = durably_cli("runs", "show", "o1", "--json", "--store", store_url, cwd=tmp_path)
    history = json.loads(as_json.stdout)["history"]
    tracebacks = [e["traceback"] for e in history if e["traceback"]]
    assert len(tracebacks) == 2
    assert all("in price_of" in text for text in tracebacks)
