"""The count of failed token attempts by client address (durably.web.lockouts), on instants
passed in: an address is locked out after its failures fill the window, until the oldest of
them leaves it; other addresses are not; a lockout is reported once; and an attacker rotating
addresses cannot grow the count past its bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durably.web.lockouts import Lockouts

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def test_an_address_is_locked_out_until_its_oldest_failure_leaves_the_window() -> None:
    lockouts = Lockouts(failures=3, window=60 * S)
    assert [lockouts.failed("10.0.0.1", T0 + n * 10 * S) for n in range(3)] == [
        False,
        False,
        True,  # the one that locks it out, reported once
    ]
    assert lockouts.locked("10.0.0.1", T0 + 20 * S) == 40 * S
    assert lockouts.locked("10.0.0.1", T0 + 59 * S) == 1 * S
    assert lockouts.locked("10.0.0.2", T0 + 20 * S) is None  # another address may try
    assert lockouts.locked("10.0.0.1", T0 + 60 * S) is None  # the first failure left
    assert lockouts.failed("10.0.0.1", T0 + 60 * S) is True  # the window slides: full again
    assert lockouts.locked("10.0.0.1", T0 + 61 * S) == 9 * S


def test_failures_spread_wider_than_the_window_never_lock_out() -> None:
    lockouts = Lockouts(failures=3, window=60 * S)
    for n in range(20):
        assert lockouts.failed("10.0.0.1", T0 + n * 31 * S) is False
        assert lockouts.locked("10.0.0.1", T0 + n * 31 * S) is None


def test_only_the_failure_that_fills_the_window_reports_a_lockout() -> None:
    lockouts = Lockouts(failures=2, window=60 * S)
    reports = [lockouts.failed("10.0.0.1", T0) for _ in range(5)]  # attempts already under way
    assert reports == [False, True, False, False, False]


def test_an_attacker_rotating_addresses_cannot_grow_the_count_past_its_bound() -> None:
    lockouts = Lockouts(failures=3, window=60 * S, most_addresses=100)
    for n in range(10_000):
        lockouts.failed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}", T0)
    assert lockouts.remembered == 100
    assert lockouts.locked("10.0.39.15", T0) is None  # the latest address is remembered...
    for _ in range(2):
        lockouts.failed("10.0.39.15", T0)
    assert lockouts.locked("10.0.39.15", T0) == 60 * S  # ...and its failures counted
    assert lockouts.locked("10.0.0.0", T0 + 61 * S) is None


def test_addresses_whose_failures_left_the_window_are_forgotten() -> None:
    lockouts = Lockouts(failures=3, window=60 * S)
    lockouts.failed("10.0.0.1", T0)
    assert lockouts.remembered == 1
    assert lockouts.locked("10.0.0.1", T0 + 60 * S) is None
    assert lockouts.remembered == 0


@pytest.mark.parametrize(
    ("failures", "window", "said"),
    [(0, 60 * S, "at least 1, not 0"), (3, timedelta(0), "longer than nothing (say 1m)")],
)
def test_a_lockout_that_could_not_work_is_refused(
    failures: int, window: timedelta, said: str
) -> None:
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        Lockouts(failures=failures, window=window)
