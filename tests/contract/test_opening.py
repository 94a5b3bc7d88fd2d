"""The Store contract for opening a store that must exist (open_store(create=False), what
the CLI does, and every opener under $DURABLY_MIGRATE=never): it reads and writes one that
exists, and refuses, changing nothing, a missing SQLite file, a database without durably's
tables, or a schema from a newer or an older durably (which `durably migrate` updates)."""

from __future__ import annotations

from pathlib import Path

import pytest

import durably
from durably.errors import ConfigError, SchemaTooNew, SchemaTooOld
from durably.stores import Store, migrate_store, open_store
from durably.stores.sql.schema import LATEST_VERSION
from durably.testing import FakeClock

from .support import LEASE, execute_sql, new_run, older_schema

_TABLES = {
    "sqlite": "SELECT name FROM sqlite_master"
    " WHERE type = 'table' AND substr(name, 1, 8) = 'durably_'",
    "postgres": "SELECT tablename FROM pg_tables WHERE substr(tablename, 1, 8) = 'durably_'"
    " AND schemaname = current_schema()",
}
_VERSION = "SELECT value FROM durably_meta WHERE key = 'schema_version'"


def _tables(url: str) -> list[str]:
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    return sorted(row[0] for row in execute_sql(url, _TABLES[dialect]))


def test_an_existing_store_opens_as_it_is_for_reading_and_writing(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())

    existing = open_store(store_url, create=False, keys=getattr(store, "keys", None))
    try:
        assert existing.get_run("r1") == store.get_run("r1")
        assert existing.create_run(new_run("r2"), now=clock.now())[1] is True
    finally:
        existing.close()
    assert [run.id for run in store.runs()] == ["r2", "r1"]
    assert "durably_runs" in _tables(store_url)  # what the refusals below must not create


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no durably tables: an empty SQLite file (what an older durably CLI
    left behind), or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        (tmp_path / "empty.db").touch()
        return f"sqlite:///{tmp_path / 'empty.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def test_a_database_without_durably_tables_is_refused_and_left_alone(empty_url: str) -> None:
    with pytest.raises(ConfigError, match="is not a durably store: it has no durably"):
        open_store(empty_url, create=False)

    assert _tables(empty_url) == []


def test_a_missing_sqlite_file_is_refused_by_its_absolute_path_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ConfigError) as raised:
        open_store("sqlite:///sub/durably.db", create=False)

    message = str(raised.value)
    assert f"there is no durably store at {tmp_path / 'sub' / 'durably.db'}" in message
    assert f"relative to the current directory ({tmp_path})" in message
    assert "sqlite:////abs/path.db is absolute" in message
    assert list(tmp_path.iterdir()) == []


def test_a_schema_from_a_newer_durably_is_refused_unchanged(store: Store, store_url: str) -> None:
    newer = str(LATEST_VERSION + 1)
    execute_sql(
        store_url, "UPDATE durably_meta SET value = ? WHERE key = 'schema_version'", [newer]
    )

    with pytest.raises(SchemaTooNew, match="upgrade"):
        open_store(store_url, create=False)


def test_a_schema_from_an_older_durably_is_refused_unchanged_naming_durably_migrate(
    store_url: str,
) -> None:
    older_schema(store_url, 6)

    with pytest.raises(SchemaTooOld) as raised:
        open_store(store_url, create=False)

    message = str(raised.value)
    assert f"is at version 6, but this durably needs version {LATEST_VERSION}" in message
    assert "run `durably migrate --store " in message
    assert execute_sql(store_url, _VERSION) == [("6",)]  # left as it was


def test_durably_migrate_brings_an_older_schema_up_to_date_and_says_from_what(
    store_url: str, clock: FakeClock
) -> None:
    older_schema(store_url, 6)

    assert migrate_store(store_url).found == 6
    assert migrate_store(store_url).found == LATEST_VERSION  # again: nothing to do

    opened = open_store(store_url, create=False)
    try:
        assert opened.create_run(new_run("r1"), now=clock.now())[1] is True
    finally:
        opened.close()
    assert execute_sql(store_url, _VERSION) == [(str(LATEST_VERSION),)]


def test_a_run_made_before_version_15_is_claimed_with_its_history_after_the_migration(
    store_url: str, clock: FakeClock
) -> None:
    # V15 keeps a run's run_started data in its row (PostgreSQL); the runs of before have
    # none there, and their first claim must read it from their history.
    older_schema(store_url, 14)
    born = clock.now().timestamp()
    execute_sql(
        store_url,
        "INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at,"
        " available_at, event_count) VALUES ('old', 'charge', 'pending', '{}', ?, ?, ?, 1)",
        [born, born, born],
    )
    started = '{"correlation_id": "order-7"}'
    if store_url.startswith("sqlite"):
        columns, values = "", ""
    else:
        columns, values = ", born", f", {born!r}"
    execute_sql(
        store_url,
        f"INSERT INTO durably_events (run_id, seq, kind, at, data{columns})"
        f" VALUES ('old', 1, 'run_started', ?, ?{values})",
        [born, started],
    )

    assert migrate_store(store_url).found == 14
    opened = open_store(store_url, create=False)
    try:
        [claim] = opened.claim("w", ["charge"], now=clock.now(), lease=LEASE, limit=5)
        assert list(claim.events) == opened.history("old")
        assert (claim.events[0].kind, claim.events[0].data) == ("run_started", started)
    finally:
        opened.close()


def test_durably_migrate_never_makes_apps_check_the_schema_and_not_change_it(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$DURABLY_MIGRATE=never: what the workers, the server and `durably start` open (an
    App's store) is refused, older or missing, instead of migrated or created."""
    monkeypatch.setenv("DURABLY_MIGRATE", "never")
    with pytest.raises(ConfigError, match=r"(is not a|there is no) durably store"):
        _ = durably.App(store_url).store
    assert _tables(store_url) == []

    older_schema(store_url, 6)
    with pytest.raises(SchemaTooOld, match="is at version 6"):
        _ = durably.App(store_url).store
    assert execute_sql(store_url, _VERSION) == [("6",)]

    migrate_store(store_url)  # what `durably migrate` does, whatever $DURABLY_MIGRATE says
    app = durably.App(store_url)
    try:
        assert app.store.runs() == []
    finally:
        app.close()


def test_an_unknown_durably_migrate_setting_is_refused_naming_the_settings(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLY_MIGRATE", "sometimes")

    settings = r"\$DURABLY_MIGRATE is 'sometimes': use auto .* or never"
    with pytest.raises(ConfigError, match=settings):
        _ = durably.App(sqlite_url).store
