"""`durably audit`: the audit trail, every action people and tokens took across runs, newest
first (durably.core.audit)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click

from durably.cli.base import MOMENT, PRECEDENCE, SINCE, cli, client_for, where
from durably.cli.output import AS_JSON, Column, echo_json, echo_table
from durably.client.audit import MAX_PAGE
from durably.core.audit import AuditEntry
from durably.views.models import AuditPageOut

__all__ = ["audit"]


@cli.command(epilog=PRECEDENCE)
@where
@click.option(
    "--since",
    type=SINCE,
    default=None,
    metavar="DURATION_OR_TIME",
    help="Only actions at or after it: a time (2026-11-27T10:00, UTC unless it says), or a "
    "duration back from now (1h, 7d).",
)
@click.option("--until", type=MOMENT, default=None, help="Only actions before this time.")
@click.option("--by", "actor", default=None, metavar="NAME", help="Only the actions of NAME.")
@click.option("--run", "run_id", default=None, metavar="RUN", help="Only the actions on RUN.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, MAX_PAGE))
@click.option("--cursor", default=None, help="Where the page starts (printed under the last).")
@AS_JSON
def audit(
    app_target: str | None,
    store_url: str | None,
    since: datetime | timedelta | None,
    until: datetime | None,
    actor: str | None,
    run_id: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """Every action people and tokens took (start, cancel, pause, resume, retry, skip, fail,
    restart, approve, reject, signal, release, dashboard logins), newest first: who, how
    (api, dashboard, cli, library), on which run. No input, signal data or result is shown:
    the trail never holds them."""
    with client_for(app_target, store_url) as client:
        if isinstance(since, timedelta):
            since = client.clock.now() - since
        page = client.audit(
            limit=limit, cursor=cursor, since=since, until=until, by=actor, run_id=run_id
        )
    if as_json:
        echo_json(AuditPageOut.of(page))
        return
    echo_table(
        [
            Column("AT (UTC)"),
            Column("BY", max_width=32),
            Column("ACTION"),
            Column("VIA"),
            Column("RUN", max_width=40),
            Column("WORKFLOW", max_width=24),
            Column("DETAIL", fold=True),
        ],
        (_row(entry) for entry in page.entries),
    )
    if page.next_cursor is not None:
        click.echo(f"(more: the next page is --cursor {page.next_cursor})")


def _row(entry: AuditEntry) -> list[str]:
    detail = json.loads(entry.detail) if entry.detail else {}
    return [
        entry.at.strftime("%Y-%m-%d %H:%M:%S"),
        entry.by,
        entry.action,
        entry.via,
        entry.run_id or "",
        entry.workflow or "",
        ", ".join(f"{key}: {value}" for key, value in detail.items()),
    ]
