"""`durably worker --processes N` before any process starts: the arithmetic of a child's
restarts, the options a child is given back, and the command lines refused, each with one
line saying why (the supervisor at work: tests/chaos/test_worker_processes.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durably.cli.supervisor import (
    FIRST_DELAY,
    MOST_DELAY,
    STEADY,
    Supervisor,
    duration_text,
    restart_delay,
)
from durably.durations import parse_duration
from tests.console import run_durably

TARGET = "tests.integration.stop_app:app"


def test_a_child_dying_again_and_again_waits_twice_as_long_each_time_up_to_the_most() -> None:
    delays, delay = [], None
    for _ in range(8):
        delay = restart_delay(delay, lived=timedelta(seconds=2))
        delays.append(delay.total_seconds())
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]
    assert FIRST_DELAY.total_seconds() == delays[0]
    assert MOST_DELAY.total_seconds() == delays[-1]


def test_a_child_that_lived_a_while_is_started_again_after_the_first_delay() -> None:
    assert restart_delay(MOST_DELAY, lived=STEADY) == FIRST_DELAY
    assert restart_delay(MOST_DELAY, lived=STEADY - timedelta(seconds=1)) == MOST_DELAY


@pytest.mark.parametrize(
    "duration",
    [
        timedelta(seconds=10),
        timedelta(milliseconds=200),
        timedelta(microseconds=500),
        timedelta(hours=2, milliseconds=1),
        timedelta(0),
    ],
)
def test_a_childs_durations_read_back_as_the_parents(duration: timedelta) -> None:
    assert parse_duration(duration_text(duration)) == duration


def test_a_supervisor_of_nobody_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one child"):
        Supervisor([], stop_grace=timedelta(seconds=10))


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--processes", "0"], "Invalid value for '--processes': 0 is not in the range x>=1"),
        (["--processes", "-2"], "Invalid value for '--processes': -2 is not in the range x>=1"),
        (["--processes", "two"], "Invalid value for '--processes': 'two' is not a valid integer"),
        (
            ["--processes", "4", "--metrics-port", "65534"],
            "Invalid value for --metrics-port: 4 workers serve their metrics on ports 65534 "
            "to 65537, past 65535: give a lower port",
        ),
        (["--processes", "2", "--lease", "500ms"], "lease must be at least 1s"),
        (["--lease", "500ms"], "lease must be at least 1s"),  # one process: the same words
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(options: list[str], said: str) -> None:
    status, err = run_durably("worker", TARGET, *options)
    assert status == 2, err
    error = err.splitlines()[-1]
    assert error.startswith("error: "), err
    assert said in error, err
    assert "supervisor: worker" not in err  # no process was started


def test_a_queue_the_app_does_not_declare_is_refused_before_any_child_starts() -> None:
    status, err = run_durably("worker", TARGET, "--processes", "2", "--queues", "nowhere")
    assert status == 1, err
    assert err.splitlines()[-1].startswith("error: no queue named 'nowhere' is declared"), err
    assert "supervisor: worker" not in err
