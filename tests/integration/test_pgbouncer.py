"""durably behind a real PgBouncer in transaction pooling mode (tests/pgbouncer.py).

In transaction mode a server connection serves whichever client begins a transaction next,
so nothing may live on a session. `?pgbouncer=transaction` in the store URL turns psycopg's
automatic server-side prepared statements off, and listens for wake-ups only on a direct
`listen_url` (a LISTEN through the pooler hears nothing): without one, workers and waiters
poll, and the change stream, which has no poll to fall back on, is refused."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

import durably
from durably.core.webhooks import StatusChange
from durably.errors import ConfigError
from durably.stores import open_store
from durably.stores.postgres.store import PostgresStore
from tests.conftest import POSTGRES_URL
from tests.pgbouncer import Bouncer

from .pgbouncer_app import make_app
from .processes import start_worker, wait_until
from .test_cli import durably_cli

pytestmark = pytest.mark.postgres

TARGET = "tests.integration.pgbouncer_app:app"
RUNS = 24  # each a dozen statements, most of them the same few: many times past the threshold


@pytest.fixture
def client(pgbouncer: Bouncer) -> Iterator[durably.App]:
    """The app of tests.integration.pgbouncer_app on the store behind pgbouncer, its tables
    made (through pgbouncer) with the ledger its transactional step writes."""
    app = make_app(f"{pgbouncer.url}?pgbouncer=transaction")
    app.store  # noqa: B018  (opens and migrates the store)
    with psycopg.connect(pgbouncer.url, autocommit=True) as db:
        db.execute("CREATE TABLE pgb_ledger (key text PRIMARY KEY, total int NOT NULL)")
    yield app
    app.close()


def test_workers_and_a_client_run_many_runs_through_transaction_pooling(
    pgbouncer: Bouncer, client: durably.App, tmp_path: Path
) -> None:
    url = f"{pgbouncer.url}?pgbouncer=transaction"
    logs = [tmp_path / f"worker{n}.log" for n in range(2)]
    workers = [start_worker(url, log, "--poll", "50ms", target=TARGET) for log in logs]
    sharing = _Sampler(pgbouncer)
    try:
        handles = client.start_many(
            [durably.Start("tally", (f"k{n}", n), id=f"run-{n}") for n in range(RUNS)]
        )
        for handle in handles:  # each ran its six steps and waits for its signal
            assert handle.get_event("stage", timeout=60, poll="50ms") == "added"
        for n, handle in enumerate(handles):
            client.client.signal(handle.id, "go", 100 * n)
        results = [handle.result(timeout=60, poll="50ms") for handle in handles]
        clients, servers = sharing.stop()
    finally:
        sharing.stop()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    worked = "\n".join(log.read_text() for log in logs)
    expected = [n + 21 + 100 * n for n in range(RUNS)]  # start + 1..6 + the signal's bonus
    assert results == expected, worked
    with psycopg.connect(pgbouncer.direct_url) as db:
        ledger = dict(db.execute("SELECT key, total FROM pgb_ledger").fetchall())
    assert ledger == {f"k{n}": total for n, total in enumerate(expected)}
    assert [worker.returncode for worker in workers] == [0, 0], worked
    assert "prepared statement" not in worked
    # Server connections really were shared: more of durably's clients than the pool's 2.
    assert servers <= 2 < clients, (clients, servers)
    # Without a listen_url, the workers said once that they poll instead of listening.
    for log in logs:
        assert log.read_text().count("polling instead") == 1, log.read_text()


def test_a_direct_listen_url_brings_wake_ups_through_a_transaction_pooler(
    pgbouncer: Bouncer, client: durably.App, tmp_path: Path
) -> None:
    direct = quote(pgbouncer.direct_url, safe="")
    url = f"{pgbouncer.url}?pgbouncer=transaction&listen_url={direct}"
    log = tmp_path / "worker.log"
    # Polls of a minute, on both sides: a run picked up, and its end heard, before the
    # timeout of 30 s were so by their wake-ups (the worker is listening once it is listed).
    worker = start_worker(url, log, "--poll", "60s", target=TARGET)
    listening = make_app(url)
    try:
        wait_until("the worker's start", lambda: bool(listening.client.workers()), log)
        handles = [listening.start("quick", n) for n in range(5)]
        results = [handle.result(timeout=30, poll="60s") for handle in handles]
        assert results == [1, 2, 3, 4, 5]
    finally:
        listening.close()
        worker.terminate()
        worker.wait(timeout=30)
    assert "polling instead" not in log.read_text()  # no warning: it listened


def test_the_change_stream_needs_a_direct_listen_url_behind_a_transaction_pooler(
    pgbouncer: Bouncer, client: durably.App, tmp_path: Path
) -> None:
    behind = open_store(f"{pgbouncer.url}?pgbouncer=transaction")
    try:
        with pytest.raises(ConfigError, match=r"listen_url=.*straight to the same database"):
            behind.watch_status_changes(lambda change: None)
    finally:
        behind.close()
    listen = durably_cli(
        "listen", "--store", f"{pgbouncer.url}?pgbouncer=transaction", cwd=tmp_path
    )
    assert listen.returncode != 0
    assert "add listen_url=" in listen.stderr, listen.stderr

    direct = quote(pgbouncer.direct_url, safe="")
    store = open_store(f"{pgbouncer.url}?pgbouncer=transaction&listen_url={direct}")
    heard: queue.Queue[StatusChange] = queue.Queue()
    try:
        assert store.set_status_changes(True)  # as the tables' owner, through pgbouncer
        stop = store.watch_status_changes(heard.put)
        try:
            client.start("quick", 1, id="changed")
            assert client.run_until_idle() == 1  # claimed (running), then completed
            changes = [heard.get(timeout=10), heard.get(timeout=10)]
        finally:
            stop()
    finally:
        store.close()
    assert [(c.run, str(c.status)) for c in changes] == [
        ("changed", "running"),
        ("changed", "completed"),
    ]


@pytest.mark.parametrize("pgbouncer", [1], indirect=True)  # one server connection for all
def test_prepared_statements_break_behind_a_transaction_pooler_unless_the_url_says_so(
    pgbouncer: Bouncer, client: durably.App, caplog: pytest.LogCaptureFixture
) -> None:
    # Without the option: psycopg prepares a statement it ran 5 times, under the same name
    # on each connection; two of durably's connections on pgbouncer's one server connection
    # then collide (or one finds its statement gone), and the log says what to do.
    plain = [PostgresStore(pgbouncer.url, pool_size=1) for _ in range(2)]
    try:
        with (
            caplog.at_level(logging.WARNING, logger="durably.store"),
            pytest.raises(psycopg.errors.ProgrammingError, match="prepared statement"),
        ):
            _read_in_turn(plain, times=10)
    finally:
        for store in plain:
            store.close()
    assert "?pgbouncer=transaction" in caplog.text

    # With it, no statement is prepared: the same reads on the same pool all answer.
    behind = [
        PostgresStore(f"{pgbouncer.url}?pgbouncer=transaction", pool_size=1) for _ in range(2)
    ]
    try:
        assert _read_in_turn(behind, times=10) == [None] * 20
    finally:
        for store in behind:
            store.close()


def _read_in_turn(stores: list[PostgresStore], *, times: int) -> list[object]:
    """The same read on each store in turn, `times` over: what each answered."""
    return [store.get_run("nothing") for _ in range(times) for store in stores]


class _Sampler:
    """How many client connections pgbouncer had for the test's database at most, and how
    many server connections, sampled every 50 ms from its admin console until stop()."""

    def __init__(self, bouncer: Bouncer) -> None:
        self._bouncer = bouncer
        self.clients = self.servers = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stopping.wait(0.05):
            clients, servers = self._bouncer.connections()
            self.clients, self.servers = max(self.clients, clients), max(self.servers, servers)

    def stop(self) -> tuple[int, int]:
        self._stopping.set()
        self._thread.join()
        return self.clients, self.servers


@pytest.mark.parametrize("jit", ["on", "off"])
def test_a_role_left_jit_compiling_behind_a_transaction_pooler_is_told_how_to_stop_it(
    pgbouncer: Bouncer, caplog: pytest.LogCaptureFixture, jit: str
) -> None:
    """Through a transaction pooler durably cannot turn JIT off for its sessions (a SET stays
    on one server connection), so a role with it on hears, once, how to turn it off."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
        db.execute(f"ALTER ROLE {pgbouncer.role} SET jit = {jit}")  # type: ignore[arg-type]
    pgbouncer.reconnect()  # server connections made since: with the role's setting of now
    with caplog.at_level(logging.WARNING, logger="durably.store"):
        store = PostgresStore(f"{pgbouncer.url}?pgbouncer=transaction", pool_size=2)
        store.close()
    told = [record.getMessage() for record in caplog.records if "JIT" in record.getMessage()]
    if jit == "off":
        assert told == []
    else:
        assert told == [told[0]], told  # once, for every connection of the store
        assert f"ALTER ROLE {pgbouncer.role} SET jit = off" in told[0]
