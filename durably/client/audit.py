"""Reading the audit trail (durably.core.audit): a page of entries, newest first, found by
time, by who acted and by run, with the opaque cursor of the next page."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from durably.client.pages import moment_of
from durably.core.audit import AuditEntry
from durably.core.names import check_name
from durably.errors import PayloadError
from durably.stores.protocol import Store

__all__ = ["AuditPage", "audit_page"]

MAX_PAGE = 1000  # entries a page holds at most: the store's query is bounded by it


@dataclass(frozen=True, slots=True)
class AuditPage:
    entries: list[AuditEntry]
    next_cursor: str | None  # pass it as `cursor` for the next page; None after the last


def audit_page(
    store: Store,
    *,
    limit: int,
    cursor: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    by: str | None = None,
    run_id: str | None = None,
) -> AuditPage:
    """Up to `limit` entries, newest first, from where `cursor` (the previous page's
    next_cursor) says; only those recorded at or after `since` and before `until`, by `by`,
    on the run `run_id`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise PayloadError(f"a page of the audit trail holds 1 to {MAX_PAGE} entries: {limit!r}")
    # One more than asked: whether there is a next page, without a last empty one.
    found = store.audit_trail(
        limit=limit + 1,
        before=None if cursor is None else _before(cursor),
        since=None if since is None else moment_of(since, "since"),
        until=None if until is None else moment_of(until, "until"),
        by=None if by is None else check_name(by, "who acted (by)"),
        run_id=None if run_id is None else check_name(run_id, "a run's id"),
    )
    page = found[:limit]
    return AuditPage(page, _cursor(page[-1]) if len(found) > limit else None)


def _cursor(entry: AuditEntry) -> str:
    """Where the next page starts, as an opaque string: the last entry's (at, id)."""
    key = json.dumps([entry.at.isoformat(), entry.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def _before(cursor: str) -> tuple[datetime, int]:
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        moment, entry_id = json.loads(key)
        at = datetime.fromisoformat(moment)
        if at.tzinfo is None or not isinstance(entry_id, int) or isinstance(entry_id, bool):
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error):
        shown = cursor if len(cursor) <= 60 else cursor[:59] + "…"
        raise PayloadError(
            f"the cursor {shown!r} is not one the audit trail gave out: pass the next_cursor "
            "of the previous page as it is (none for the first page)"
        ) from None
    return at, entry_id
