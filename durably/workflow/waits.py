"""Durable waits in workflow code: timers (`sleep`, `sleep_until`) and signal waits.

Each is recorded in the run's history at its place in the workflow. In an async workflow
they are awaited; in a sync workflow the same calls block. While a run waits it is handed
back and holds no worker (runtime/waits.py is the engine's side).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from durably.core.signals import check_signal_name
from durably.durations import Duration, parse_duration
from durably.errors import DurablyError
from durably.workflow.context import Execution, durable_call

__all__ = ["checked_duration", "sleep", "sleep_until", "wait_for_signal"]


def sleep(duration: Duration) -> Any:
    """Wait `duration` ("10m", "2d", seconds, a timedelta), durably: the run is handed back
    and holds no worker until the time comes, across restarts of every worker."""
    delta = checked_duration(duration, "the sleep's duration")
    return _wait("sleep", lambda execution: _until(execution, delta))


def sleep_until(moment: datetime) -> Any:
    """Wait until `moment` (a datetime with a time zone), durably."""
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise DurablyError(
            f"durably.sleep_until() needs a datetime with a time zone, not {moment!r}; "
            "for example datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)"
        )
    return _wait("sleep_until", lambda _execution: moment)


def wait_for_signal(name: str, *, timeout: Duration | None = None) -> Any:
    """The payload of the next signal `name` sent to this run (app.client.signal, `durably signal`),
    waiting for it durably. Signals sent before the wait are kept and taken in the order they
    came, each by one wait. Raises durably.SignalTimeout if `timeout` passes first."""
    check_signal_name(name)
    delta = None if timeout is None else checked_duration(timeout, "the signal's timeout")

    def wait(execution: Execution) -> Any:
        return json.loads(execution.waits.wait_for_signal(name, delta))

    return durable_call("wait_for_signal", wait, awaited=True)


def checked_duration(value: Duration, what: str) -> timedelta:
    """`value` as a timedelta; DurablyError naming `what` if durably cannot read it."""
    try:
        return parse_duration(value, what=what)
    except ValueError as exc:
        raise DurablyError(str(exc)) from None


def _until(execution: Execution, delta: timedelta) -> datetime:
    return execution.clock_now() + delta


def _wait(what: str, until: Callable[[Execution], datetime]) -> Any:
    def wait(execution: Execution) -> None:
        execution.waits.sleep_until(until(execution))

    return durable_call(what, wait, awaited=True)
