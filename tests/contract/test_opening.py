"""The Store contract for opening a store that must exist (open_store(create=False), what
the CLI does): it reads and writes one that exists, and refuses, changing nothing, a missing
SQLite file, a database without durably's tables, or a schema from a newer durably."""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.errors import ConfigError, SchemaTooNew
from durably.stores import Store, open_store
from durably.stores.sql.schema import LATEST_VERSION
from durably.testing import FakeClock

from .support import execute_sql, new_run

_TABLES = {
    "sqlite": "SELECT name FROM sqlite_master"
    " WHERE type = 'table' AND substr(name, 1, 8) = 'durably_'",
    "postgres": "SELECT tablename FROM pg_tables WHERE substr(tablename, 1, 8) = 'durably_'"
    " AND schemaname = current_schema()",
}


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
