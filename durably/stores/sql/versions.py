"""Moving a run to another version of its workflow (durably upgrade), one implementation for
both stores: only while the run is as the caller saw it when it checked that the new code
replays its history."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from durably.core.audit import Audit
from durably.core.history import Event
from durably.core.status import FINAL
from durably.stores.sql import audit as trail
from durably.stores.sql.effects import insert_event
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import ts

__all__ = ["move"]

_ENDED = ", ".join(f"'{status}'" for status in sorted(FINAL))


def move(
    db: Connection,
    dialect: Dialect,
    run_id: str,
    *,
    from_version: str,
    to_version: str,
    seen: int,
    note: Event,
    now: datetime,
    audit: Audit | None = None,
) -> bool:
    """Inside the caller's write transaction: move the run to `to_version`, append `note`
    after its last event and `audit` to the trail (a person asked for the move), if it is
    still on `from_version` with `seen` events, has not ended, and no lease holds it (none, or
    one that expired: its worker is presumed dead). False, writing nothing, otherwise."""
    mark = dialect.mark
    moved = db.execute(
        f"UPDATE durably_runs SET version = {mark}, event_count = event_count + 1"
        f" WHERE id = {mark} AND version = {mark} AND event_count = {mark}"
        f" AND status NOT IN ({_ENDED})"
        f" AND NOT (status = 'running' AND available_at > {mark})",
        (to_version, run_id, from_version, seen, ts(now)),
    ).rowcount
    if moved != 1:
        return False
    insert_event(db, dialect, run_id, replace(note, seq=seen + 1))
    if audit is not None:
        trail.record(db, dialect, audit, now=now, run_id=run_id)
    return True
