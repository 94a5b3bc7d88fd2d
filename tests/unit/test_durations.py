"""Durations as users write them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durably.durations import Duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("10s", timedelta(seconds=10)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("2d", timedelta(days=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s5ms", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
        ("1.5s", timedelta(seconds=1.5)),
        ("0s", timedelta(0)),
        (" 10S ", timedelta(seconds=10)),  # spaces around and upper case are forgiven
    ],
)
def test_strings(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("number", "expected"),
    [(0, timedelta(0)), (3, timedelta(seconds=3)), (1.5, timedelta(seconds=1.5))],
)
def test_numbers_are_seconds(number: float, expected: timedelta) -> None:
    assert parse_duration(number) == expected


def test_a_timedelta_is_taken_as_it_is() -> None:
    assert parse_duration(timedelta(minutes=7)) == timedelta(minutes=7)


@pytest.mark.parametrize("text", ["", "10", "ten seconds", "10x", "1h 30m", "s", "-5s", "1,5s"])
def test_unreadable_strings_say_how_to_write_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match=r"cannot read .* as a duration; write it like '500ms'"):
        parse_duration(text)


@pytest.mark.parametrize("value", [-1, -0.5, timedelta(seconds=-1)])
def test_negative_durations_are_refused(value: Duration) -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_duration(value)


@pytest.mark.parametrize("value", [True, None, [1], object()])
def test_other_types_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(value)  # type: ignore[arg-type]


def test_the_error_names_what_was_being_parsed() -> None:
    with pytest.raises(ValueError, match=r"^lease: cannot read 'soon'"):
        parse_duration("soon", what="lease")
    with pytest.raises(ValueError, match=r"^timeout: a duration cannot be negative"):
        parse_duration(-3, what="timeout")
