"""What a run publishes for callers while it runs: events (a durable key and its latest value,
`durably.set_event`), streams (ordered items under a key, `durably.write_stream`) and
progress (an event of its own, `durably.progress`). Pure: names, the records stores keep and
give back, and the rules that make a stream's writes idempotent.

Why a stream item names its writer: a workflow body runs again on every replay, and a step
runs again after a crash, so the same write can be made twice. Each write has a place that is
the same every time it is made: the n-th write of the workflow's own code in the run's
generation (`1/w7`), or the n-th write of the step at position p in that generation (`1/s3.7`,
whatever the attempt). A store keeps the first item written at a place and ignores the same
place written again, so a reader never sees an item twice and the stream's order is the
order places were first written in.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durably.errors import ConfigError

__all__ = [
    "PROGRESS",
    "Progress",
    "PublishedEvent",
    "StreamItem",
    "StreamWrite",
    "check_key",
    "close_place",
    "step_place",
    "workflow_place",
]

PROGRESS = "durably.progress"  # the event key durably.progress sets
_LONGEST_KEY = 200


def check_key(key: object, what: str) -> str:
    """`key` if it may name an event or a stream; ConfigError naming the fault if not."""
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(f"{what} key must be a non-empty string, not {key!r}")
    if len(key) > _LONGEST_KEY or any(ord(c) < 32 for c in key):
        raise ConfigError(
            f"{what} key {key[:40]!r}... is not usable: at most {_LONGEST_KEY} characters, none"
            " of them control characters"
        )
    return key


def workflow_place(generation: int, n: int) -> str:
    """The place of the n-th stream write of a run's workflow code in `generation`."""
    return f"{generation}/w{n}"


def step_place(generation: int, position: int, n: int) -> str:
    """The place of the n-th stream write of the step at `position`, in any of its attempts."""
    return f"{generation}/s{position}.{n}"


def close_place() -> str:
    """The place of a stream's end: one per stream, so closing it again changes nothing."""
    return "end"


@dataclass(frozen=True, slots=True)
class StreamWrite:
    """An item to append to the stream `key` (value None: the stream's end)."""

    key: str
    place: str
    value: str | None  # JSON
    attempt: int | None = None  # the attempt of the step that wrote it (None: workflow code)


@dataclass(frozen=True, slots=True)
class StreamItem:
    """An item of a stream as stored: its offset (0, 1, ... in the order written), its value
    as JSON (None: the stream ended here), who wrote it, and when."""

    offset: int
    value: str | None
    place: str
    attempt: int | None
    at: datetime

    @property
    def is_end(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True)
class PublishedEvent:
    """The latest value of an event key of a run, as JSON, and when it was set."""

    key: str
    value: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a run got, as `durably.progress(done, total, message)` said last."""

    done: float
    total: float | None = None
    message: str | None = None

    def __post_init__(self) -> None:
        for name in ("done", "total"):
            value = getattr(self, name)
            if value is None and name == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"durably.progress: {name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"durably.progress: {name} must be a finite number >= 0")
        if self.message is not None and not isinstance(self.message, str):
            raise ConfigError(f"durably.progress: message must be text, not {self.message!r}")

    @property
    def fraction(self) -> float | None:
        """done / total, at most 1 (None without a total)."""
        if not self.total:
            return None
        return min(self.done / self.total, 1.0)

    def to_json(self) -> str:
        return json.dumps({"done": self.done, "total": self.total, "message": self.message})

    @classmethod
    def from_json(cls, text: str) -> Progress | None:
        """The progress an event's value says (None if it is not one durably.progress set)."""
        try:
            data: Any = json.loads(text)
            return cls(data["done"], data.get("total"), data.get("message"))
        except (ValueError, TypeError, KeyError, ConfigError):
            return None

    def bar(self, width: int = 20) -> str:
        """`[######--------------] 3/10 copying files` (without a total: `3 copying files`)."""
        done = _number(self.done)
        said = f" {self.message}" if self.message else ""
        fraction = self.fraction
        if fraction is None:
            return f"{done} done{said}"
        filled = round(fraction * width)
        assert self.total is not None
        return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{_number(self.total)}{said}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
