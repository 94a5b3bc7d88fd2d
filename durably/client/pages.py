"""Pages of runs: the opaque cursor `Client.runs` hands out and reads back, and a status given
as text."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durably.core.status import RunStatus
from durably.durations import Duration, parse_duration
from durably.errors import PayloadError
from durably.stores import RunRecord
from durably.stores.records import Happened

__all__ = ["RunPage", "after", "cursor", "decode_cursor", "encode_cursor", "status_of"]


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[RunRecord]
    next_cursor: str | None  # pass it as `cursor` for the next page; None after the last


def status_of(status: RunStatus | str) -> RunStatus:
    try:
        return RunStatus(status)
    except ValueError:
        known = ", ".join(RunStatus)
        raise PayloadError(f"{status!r} is not a run status (one of: {known})") from None


def happened_of(names: Iterable[Happened | str]) -> frozenset[Happened]:
    """What happened to the runs wanted, named as Happened values ("taken_over", ...)."""
    found = set()
    for name in names:
        try:
            found.add(Happened(name))
        except ValueError:
            known = ", ".join(Happened)
            raise PayloadError(
                f"{name!r} is not what can happen to a run (one of: {known})"
            ) from None
    return frozenset(found)


def moment_of(value: datetime, what: str) -> datetime:
    """A time to compare runs' times with: it must say its time zone."""
    if value.tzinfo is None:
        raise PayloadError(
            f"{what} must say its time zone (2026-11-27T10:00:00+00:00), not {value}"
        )
    return value


def duration_of(value: Duration, what: str) -> timedelta:
    try:
        return parse_duration(value, what=what)
    except ValueError as exc:
        raise PayloadError(str(exc)) from None


def cursor(run: RunRecord) -> str:
    """Where the next page starts, as an opaque string: the last run's (updated_at, id)."""
    return encode_cursor(run.updated_at, run.id)


def after(cursor: str) -> tuple[datetime, str]:
    at, run_id = decode_cursor(cursor, str, source="durably")
    return at, str(run_id)


def encode_cursor(at: datetime, key: str | int) -> str:
    """A page's cursor, an opaque string: the time and the key (a run's id, an entry's id)
    of the last row of the page, where the next page starts."""
    text = json.dumps([at.isoformat(), key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, key: type[str] | type[int], *, source: str) -> tuple[datetime, Any]:
    """The (time, key) an `encode_cursor` cursor holds; PayloadError, naming `source` (which
    gave cursors out), for one that is not such a cursor or whose key is not a `key`."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        moment, found = json.loads(text)
        at = datetime.fromisoformat(moment)
        if at.tzinfo is None or type(found) is not key:
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error):
        shown = cursor if len(cursor) <= 60 else cursor[:59] + "…"
        raise PayloadError(
            f"the cursor {shown!r} is not one {source} gave out: pass the next_cursor of the "
            "previous page as it is (none for the first page)"
        ) from None
    return at, found
