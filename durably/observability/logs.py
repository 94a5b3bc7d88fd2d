"""Structured logs: every record emitted while a run executes carries the run's id, workflow
and correlation id, and, inside a step, the step and its attempt (read from the engine's
context, so no call site passes them); `durably --log-format json ...` writes one JSON object
a line.

    {"time": "...", "level": "INFO", "logger": "durably.execution", "message": "...",
     "run_id": "...", "workflow": "fulfil", "step": "charge", "attempt": 2,
     "correlation_id": "req-42"}
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from durably.workflow.context import current_execution, current_step

__all__ = ["JsonFormatter", "RunContext", "TextFormatter", "configure"]

_FIELDS = ("run_id", "workflow", "step", "attempt", "correlation_id")


class RunContext(logging.Filter):
    """Adds run_id, workflow, correlation_id, step and attempt to a record (None outside a run
    or a step, or when the run was started with no correlation id)."""

    def filter(self, record: logging.LogRecord) -> bool:
        execution = current_execution()
        scope = current_step()
        record.run_id = getattr(execution, "run_id", None)
        record.workflow = getattr(execution, "workflow_name", None)
        record.correlation_id = getattr(execution, "correlation_id", None)
        record.step = None if scope is None else scope.name
        record.attempt = None if scope is None else scope.attempt
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the run's
    fields when the record has them, and the exception's text if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(*, json_lines: bool, level: int = logging.INFO) -> None:
    """Log to stderr: text lines (with the run's id and step when there is one), or JSON."""
    handler = logging.StreamHandler()
    handler.addFilter(RunContext())
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)


class TextFormatter(logging.Formatter):
    """The plain text format, with " [run <id> step <name>#<attempt>]" when there is one.

    A record is one line, or one line and lines indented under it (a traceback): a message
    holding a value (an error's message, a run's input) cannot forge a record of its own. Each
    line after the first is indented, and every other control character (a carriage return,
    an escape sequence that would rewrite a terminal) is written as its escape, \\r, \\x1b."""

    def format(self, record: logging.LogRecord) -> str:
        text = _one_record(super().format(record))
        run_id = getattr(record, "run_id", None)
        if run_id is None:
            return text
        step = getattr(record, "step", None)
        attempt = getattr(record, "attempt", None)
        where = f"run {run_id}" + ("" if step is None else f" step {step}#{attempt}")
        return f"{text} [{where}]"


_CONTINUED = "\n    "  # what a line of a record after its first begins with


def _one_record(text: str) -> str:
    """`text` as lines of one record: control characters escaped, but for the line breaks,
    which begin indented lines."""
    if text.isprintable():  # the usual line: nothing to do
        return text
    kept = []
    for char in text:
        if char == "\n":
            kept.append(_CONTINUED)
        elif char.isprintable() or char == "\t":
            kept.append(char)
        else:
            kept.append(char.encode("unicode_escape").decode())
    return "".join(kept)
