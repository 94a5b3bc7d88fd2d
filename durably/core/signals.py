"""Signals, as data: the inbox message kind a signal is sent as, and the rule for its name."""

from __future__ import annotations

from durably.errors import DurablyError

__all__ = ["SIGNAL_KIND", "check_signal_name"]

SIGNAL_KIND = "signal"  # the inbox message kind Client.signal sends


def check_signal_name(name: object, *, what: str = "a signal") -> str:
    """The name of a signal (or of `what`), refused unless a non-empty string."""
    if not isinstance(name, str) or not name:
        raise DurablyError(f"{what}'s name must be a non-empty string, not {name!r}")
    return name
