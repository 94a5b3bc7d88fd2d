"""The Store contract for opening a store: migrations, the recorded schema version, a
schema from a newer durably, and a store that cannot be reached."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from durably.errors import SchemaTooNew, StoreUnavailable
from durably.stores import Store, open_store
from durably.stores.sql.schema import LATEST_VERSION
from durably.testing import FakeClock

from .support import execute_sql, in_threads, new_run

_VERSION_SQL = "SELECT value FROM durably_meta WHERE key = 'schema_version'"


def test_the_schema_version_is_recorded(store: Store, store_url: str) -> None:
    assert execute_sql(store_url, _VERSION_SQL) == [(str(LATEST_VERSION),)]


def test_opening_a_store_again_is_idempotent(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())

    for _ in range(2):
        again = open_store(store_url, keys=getattr(store, "keys", None))  # the same process
        try:
            assert again.get_run("r1") == store.get_run("r1")
            assert again.history("r1") == store.history("r1")
        finally:
            again.close()

    assert execute_sql(store_url, _VERSION_SQL) == [(str(LATEST_VERSION),)]
    assert store.create_run(new_run("r2"), now=clock.now())[1] is True


def test_a_schema_from_a_newer_durably_is_refused(store: Store, store_url: str) -> None:
    newer = LATEST_VERSION + 1
    execute_sql(
        store_url, "UPDATE durably_meta SET value = ? WHERE key = 'schema_version'", [str(newer)]
    )

    with pytest.raises(SchemaTooNew) as raised:
        open_store(store_url)

    message = str(raised.value)
    assert "upgrade" in message
    assert str(newer) in message
    assert str(LATEST_VERSION) in message
    assert execute_sql(store_url, _VERSION_SQL) == [(str(newer),)]  # left as it was


def test_concurrent_first_opens_of_a_fresh_database_all_succeed(
    store_url: str, clock: FakeClock
) -> None:
    opened: list[Store] = []

    def open_it(_: int) -> None:
        store = open_store(store_url)
        opened.append(store)

    try:
        in_threads(6, open_it)
        outcomes = [store.create_run(new_run("r1"), now=clock.now())[1] for store in opened]
        assert outcomes == [True] + [False] * 5
        assert execute_sql(store_url, _VERSION_SQL) == [(str(LATEST_VERSION),)]
    finally:
        for store in opened:
            store.close()


def test_a_sqlite_file_locked_before_it_is_in_wal_mode_is_waited_for(sqlite_url: str) -> None:
    """A second opener waits (busy timeout) for a writer that holds a fresh file's lock,
    as a concurrent first open does while it switches the file to WAL and migrates it."""
    other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    outcome: list[Store | Exception] = []

    def open_it() -> None:
        try:
            outcome.append(open_store(sqlite_url))
        except Exception as exc:
            outcome.append(exc)

    opener = threading.Thread(target=open_it, name="second-opener")
    opener.start()
    opener.join(timeout=0.5)  # real time is the point: it must still be waiting here
    other.execute("COMMIT")
    other.close()
    opener.join(timeout=30)

    assert len(outcome) == 1
    opened = outcome[0]
    assert not isinstance(opened, Exception), f"the second open failed: {opened!r}"
    opened.close()


def test_an_unreachable_postgres_raises_store_unavailable_quickly() -> None:
    pytest.importorskip("psycopg_pool")
    started = time.monotonic()

    with pytest.raises(StoreUnavailable) as raised:
        open_store("postgresql://durably:s3cret-pw@127.0.0.1:1/test")

    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert "postgresql://durably:***@127.0.0.1:1/test" in message
    assert "s3cret-pw" not in message
    # The server refuses at once; a refused connection need not wait out a timeout.
    assert elapsed < 5, f"a refused connection took {elapsed:.1f}s to be reported"


@pytest.mark.parametrize("where", ["userinfo", "query"])
def test_a_postgres_store_never_shows_its_password(postgres_url: str, where: str) -> None:
    """store.url is safe to print, however the URL carries the password."""
    parts = urlsplit(postgres_url)
    secret = parts.password or "s3cret-pw"  # the test server trusts local connections
    host = parts.netloc.rpartition("@")[2]
    if where == "userinfo":
        url = urlunsplit(parts._replace(netloc=f"{parts.username}:{secret}@{host}"))
    else:
        bare = parts._replace(netloc=f"{parts.username}@{host}")
        url = urlunsplit(bare._replace(query=f"{parts.query}&password={secret}"))
    opened = open_store(url)
    try:
        assert secret not in opened.url
        assert host in opened.url
    finally:
        opened.close()


def test_a_sqlite_file_in_a_missing_directory_raises_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "no-such-directory" / "durably.db"

    with pytest.raises(StoreUnavailable) as raised:
        open_store(f"sqlite:///{path}")

    assert str(path) in str(raised.value)
    assert not path.parent.exists()
