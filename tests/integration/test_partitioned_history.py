"""A PostgreSQL store of before history partitions (schema V12) with runs mid-flight, migrated
to V14: its history becomes the legacy partition as it is, a worker carries its runs on from
their recorded steps (their new events go to the legacy partition too: a run's history stays
in one partition), and retention drops the legacy partition once its last run has gone."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import timedelta

import psycopg
import pytest

import durably
from durably import RunStatus
from durably.stores.postgres import partitions
from durably.testing import FakeClock
from tests.contract.support import execute_sql, older_schema

pytestmark = pytest.mark.postgres

_RUN_COLUMNS = (
    "id, workflow, status, input, result, error_class, error_message, created_at, updated_at,"
    " available_at, lease_owner, lease_epoch, event_count, inbox, priority, version"
)
_EVENT_COLUMNS = "run_id, seq, kind, position, name, attempt, data, at"


def _app(url: str, clock: FakeClock, ran: list[str]) -> durably.App:
    app = durably.App(url, clock=clock, seed=1)

    @app.step
    async def charge(who: str) -> str:
        ran.append(f"charge {who}")
        return f"charged {who}"

    @app.workflow
    async def order(who: str) -> str:
        charged = await charge(who)
        word = await durably.wait_for_signal("ship")
        return f"{charged}, {word}"

    return app


def _copy_as_v12(sqlite_url: str, postgres_url: str) -> None:
    """The runs and histories of a SQLite store, written into a V12 PostgreSQL schema as a
    durably of before partitions would have written them."""
    older_schema(postgres_url, 12)
    with closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))) as db:
        runs = db.execute(f"SELECT {_RUN_COLUMNS} FROM durably_runs").fetchall()
        events = db.execute(f"SELECT {_EVENT_COLUMNS} FROM durably_events").fetchall()
        inbox = db.execute(
            "SELECT run_id, kind, name, data, sender, dedupe_key, sent_at FROM durably_inbox"
        ).fetchall()
    with psycopg.connect(postgres_url) as pg:
        marks = ", ".join(["%s"] * 16)
        pg.cursor().executemany(f"INSERT INTO durably_runs ({_RUN_COLUMNS}) VALUES ({marks})", runs)
        marks = ", ".join(["%s"] * 8)
        pg.cursor().executemany(
            f"INSERT INTO durably_events ({_EVENT_COLUMNS}) VALUES ({marks})", events
        )
        pg.cursor().executemany(
            "INSERT INTO durably_inbox (run_id, kind, name, data, sender, dedupe_key, sent_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            inbox,
        )


def test_a_v12_store_with_runs_mid_flight_migrates_and_its_runs_carry_on(
    sqlite_url: str, postgres_url: str, clock: FakeClock
) -> None:
    ran: list[str] = []
    before = _app(sqlite_url, clock, ran)
    before.start("order", "ada", id="waiting")  # charged, waits for its signal
    before.start("order", "bob", id="signalled")  # charged, and its signal is in its inbox
    before.run_until_idle()
    before.client.signal("signalled", "ship", "shipped")
    before.start("order", "cy", id="due")  # not begun
    before.close()
    assert ran == ["charge ada", "charge bob"]
    _copy_as_v12(sqlite_url, postgres_url)

    clock.advance(timedelta(days=1))
    after = _app(postgres_url, clock, ran)  # migrates to V14
    try:
        after.client.signal("waiting", "ship", "sent")
        names = {p.name for p in _partitions(postgres_url)}
        assert {"durably_events_legacy", "durably_events_default"} <= names
        after.run_until_idle()
        after.client.signal("due", "ship", "off")
        after.run_until_idle()

        assert after.client.get("waiting").result == '"charged ada, sent"'
        assert after.client.get("signalled").result == '"charged bob, shipped"'
        assert after.client.get("due").result == '"charged cy, off"'
        assert ran == ["charge ada", "charge bob", "charge cy"]  # none charged twice
        homes = execute_sql(
            postgres_url, "SELECT DISTINCT tableoid::regclass::text FROM durably_events"
        )
        assert homes == [("durably_events_legacy",)]  # their histories stayed whole there
        after.start("order", "dee", id="new")  # born after the migration: elsewhere
        after.run_until_idle()
        [(home,)] = execute_sql(
            postgres_url,
            "SELECT DISTINCT tableoid::regclass::text FROM durably_events WHERE run_id = 'new'",
        )
        assert home != "durably_events_legacy"

        clock.advance(timedelta(days=3))
        assert after.client.prune(clock.now() - timedelta(days=1), limit=100) == 3
        assert "durably_events_legacy" not in {p.name for p in _partitions(postgres_url)}
        assert after.client.get("new").status is RunStatus.PENDING  # waits for its signal
        assert len(after.client.history("new")) > 2
    finally:
        after.close()


def _partitions(url: str) -> list[partitions.Partition]:
    with psycopg.connect(url, autocommit=True) as db:
        return partitions.listed(db)
