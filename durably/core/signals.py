"""Signals, as data: the inbox message kind a signal is sent as, and the rule for its name."""

from __future__ import annotations

from durably.core.names import check_name

__all__ = ["SIGNAL_KIND", "check_signal_name"]

SIGNAL_KIND = "signal"  # the inbox message kind Client.signal sends


def check_signal_name(name: object, *, what: str = "a signal") -> str:
    """The name of a signal (or of `what`): a non-empty string of printable characters."""
    return check_name(name, f"{what}'s name")
