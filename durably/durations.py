"""Durations as users write them: timedelta, seconds, or strings like "500ms", "1h30m"."""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["Duration", "parse_duration"]

Duration = timedelta | str | int | float

_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: Duration, *, what: str = "duration") -> timedelta:
    """Turn "10s", "2d", "1h30m", 1.5 (seconds) or a timedelta into a timedelta."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ValueError(f"{what}: expected a duration, got {value!r}")
    elif isinstance(value, int | float):
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        result = _parse_text(value.strip().lower(), what)
    else:
        raise ValueError(f"{what}: expected a duration such as '10s', got {value!r}")
    if result < timedelta(0):
        raise ValueError(f"{what}: a duration cannot be negative, got {value!r}")
    return result


def _parse_text(text: str, what: str) -> timedelta:
    parts = _PART.findall(text)
    if not text or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(
            f"{what}: cannot read {text!r} as a duration; write it like '500ms', '10s', "
            "'5m', '2h', '1d' or '1h30m'"
        )
    return sum((float(number) * _UNITS[unit] for number, unit in parts), timedelta(0))
