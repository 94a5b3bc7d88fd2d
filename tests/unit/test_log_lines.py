"""The text log format: a value in a message (an error's message, a run's input) cannot forge
a record of its own. Lines after a record's first are indented; other control characters are
written as their escapes."""

from __future__ import annotations

import logging
import re
import sys

from durably.observability.logs import TextFormatter

RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")  # a record's first line


def formatted(message: str, *args: object, exc_info: object = None) -> str:
    formatter = TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord(
        "durably.execution", logging.WARNING, __file__, 1, message, args, None
    )
    if exc_info is not None:
        record.exc_info = exc_info  # type: ignore[assignment]
    return formatter.format(record)


def test_a_newline_in_a_value_cannot_begin_a_record_of_its_own() -> None:
    forged = "card declined\n2026-11-27 12:00:00,000 INFO durably.worker: refund approved"
    text = formatted("run o-1: step charge failed: %s", forged)

    lines = text.split("\n")
    assert len(lines) == 2
    assert RECORD.match(lines[0])
    assert not RECORD.match(lines[1])  # indented under the record it belongs to
    assert lines[1] == "    2026-11-27 12:00:00,000 INFO durably.worker: refund approved"


def test_other_control_characters_are_written_as_their_escapes() -> None:
    text = formatted("%s", "ok\r2026 FORGED\x1b[2Jcleared\x00")

    assert "\r" not in text
    assert "\x1b" not in text
    assert "\x00" not in text
    assert text.endswith("ok\\r2026 FORGED\\x1b[2Jcleared\\x00")


def test_a_traceback_stays_readable_indented_under_its_record() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        text = formatted("it failed", exc_info=sys.exc_info())
    first, *rest = text.split("\n")
    assert RECORD.match(first)
    assert rest[0] == "    Traceback (most recent call last):"
    assert rest[-1] == "    ValueError: boom"
    assert all(line.startswith("    ") for line in rest)
