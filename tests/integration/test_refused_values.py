"""Values a store would refuse or keep differently are refused at the door, on both stores,
with what is wrong, and nothing is stored: a control character (a NUL byte PostgreSQL refuses
and SQLite keeps, a newline) in a run's id, a signal's name or who acts; a '/' in a run's id
(no path of the API could name it); NaN and the infinities, which JSON has no number for."""

from __future__ import annotations

import math
import re

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.errors import PayloadError
from durably.testing import FakeClock

from .conftest import events, settle


def make(app: durably.App) -> None:
    @app.step
    def measure(x: float) -> float:
        return x * math.inf if x > 1 else x

    @app.workflow
    def gauge(x: float) -> float:
        return measure(x)

    @app.workflow
    def waits() -> object:
        return durably.wait_for_signal("reading")


@pytest.mark.parametrize(
    ("run_id", "why"),
    [
        ("order\x00A-17", "cannot hold a control character such as '\\x00'"),
        ("order\nA-17", "cannot hold a control character such as '\\n'"),
        ("orders/A-17", "cannot hold '/'"),
        ("", "must be a non-empty string"),
        ("o" * 201, "has at most 200 characters"),
    ],
)
def test_a_run_id_a_store_or_a_path_could_not_keep_is_refused(
    app: durably.App, run_id: str, why: str
) -> None:
    make(app)
    with pytest.raises(PayloadError, match=re.escape(f"a run's id {why}")):
        app.start("gauge", 1.0, id=run_id)
    assert app.client.runs().runs == []  # nothing stored


def test_names_and_who_acts_are_refused_with_a_control_character(
    app: durably.App, clock: FakeClock
) -> None:
    make(app)
    app.start("waits", id="w-1")
    settle(app, clock)
    app.start("gauge", 1.0, id="g-1")

    with pytest.raises(PayloadError, match="a signal's name cannot hold a control character"):
        app.client.signal("w-1", "read\x00ing", 1)
    with pytest.raises(PayloadError, match=r"who acts \(by\) cannot hold a control character"):
        app.client.cancel("g-1", by="erin\x00")
    with pytest.raises(PayloadError, match="cannot hold '/'"):
        app.start("gauge", 2.0, id="g/1")
    assert events(app, "w-1", EventKind.MESSAGE_RECEIVED) == []
    assert app.client.get("g-1").status is RunStatus.PENDING  # not cancelled


def test_nan_and_infinity_are_refused_not_stored(app: durably.App, clock: FakeClock) -> None:
    make(app)
    with pytest.raises(PayloadError, match=r"input.x is nan, which JSON has no number for"):
        app.start("gauge", math.nan, id="g-nan")
    with pytest.raises(PayloadError, match=r"input.x is inf"):
        app.start("gauge", math.inf)
    assert app.client.runs().runs == []

    app.start("waits", id="w-2")
    settle(app, clock)
    with pytest.raises(PayloadError, match=r"\['level'\] is nan"):
        app.client.signal("w-2", "reading", {"level": math.nan})

    app.start("gauge", 2.0, id="g-2")  # its step's result is infinity: not stored either
    settle(app, clock)
    [failed] = events(app, "g-2", EventKind.STEP_FAILED)
    assert "which JSON has no number for" in (failed.data or "")
    assert app.client.get("g-2").status is RunStatus.FAILED
