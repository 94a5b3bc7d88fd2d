"""Reading the audit trail (durably.core.audit): a page of entries, newest first, found by
time, by who acted and by run, with the opaque cursor of the next page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from durably.client.pages import decode_cursor, encode_cursor, moment_of
from durably.core.audit import AuditEntry
from durably.core.names import check_name
from durably.errors import PayloadError
from durably.stores.protocol import Store

__all__ = ["AuditPage", "audit_page"]

MAX_PAGE = 1000  # entries a page holds at most: the store's query is bounded by it
_SOURCE = "the audit trail"  # what gives its cursors out, for the error about a bad one


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
        before=None if cursor is None else decode_cursor(cursor, int, source=_SOURCE),
        since=None if since is None else moment_of(since, "since"),
        until=None if until is None else moment_of(until, "until"),
        by=None if by is None else check_name(by, "who acted (by)"),
        run_id=None if run_id is None else check_name(run_id, "a run's id"),
    )
    page = found[:limit]
    last = page[-1] if len(found) > limit else None
    return AuditPage(page, None if last is None else encode_cursor(last.at, last.id))
