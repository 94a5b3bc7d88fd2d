"""Pages of runs: the opaque cursor `Client.runs` hands out and reads back, and a status given
as text."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from durably.core.status import RunStatus
from durably.errors import PayloadError
from durably.stores import RunRecord

__all__ = ["RunPage", "after", "cursor", "status_of"]


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


def cursor(run: RunRecord) -> str:
    """Where the next page starts, as an opaque string: the last run's (updated_at, id)."""
    key = json.dumps([run.updated_at.isoformat(), run.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def after(cursor: str) -> tuple[datetime, str]:
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        moment, run_id = json.loads(key)
        at = datetime.fromisoformat(moment)
        if at.tzinfo is None or not isinstance(run_id, str):
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error):
        shown = cursor if len(cursor) <= 60 else cursor[:59] + "…"
        raise PayloadError(
            f"the cursor {shown!r} is not one durably gave out: pass the next_cursor of the "
            "previous page as it is (none for the first page)"
        ) from None
    return at, run_id
