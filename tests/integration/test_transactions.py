"""Transactional steps on both stores: the body's writes to the app's own table and the step's
outcome commit together or not at all, whatever ends the attempt (a return, a raise, a value
that would not round-trip, a lost lease, a timeout, a COMMIT of its own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import durably
from durably import ConfigError, DurablyError, Retry, RunStatus, Terminal
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, execute_sql, step_events

WAIT = 30.0  # seconds: generous, for a loaded machine; nothing here is timed


class Ledger:
    """The app's own table, `ledger(id, amount)`, in the store's database, read from outside."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.mark = "?" if url.startswith("sqlite") else "%s"
        execute_sql(url, "CREATE TABLE ledger (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)")

    def insert(self, db: Any, entry: str, amount: int) -> None:
        db.execute(
            f"INSERT INTO ledger (id, amount) VALUES ({self.mark}, {self.mark})", (entry, amount)
        )

    def rows(self) -> list[tuple[str, int]]:
        if self.url.startswith("sqlite"):
            import sqlite3
            from contextlib import closing

            with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as db:
                return sorted(db.execute("SELECT id, amount FROM ledger").fetchall())
        import psycopg

        with psycopg.connect(self.url) as db:
            return sorted(db.execute("SELECT id, amount FROM ledger").fetchall())


@pytest.fixture
def ledger(app: durably.App, store_url: str) -> Ledger:
    app.store  # the store's tables first: the ledger lives beside them  # noqa: B018
    return Ledger(store_url)


def book_app(
    app: durably.App, ledger: Ledger, body: Callable[[Any, str, int], Any] | None = None
) -> list[str]:
    """`booking(entry, amount)`: a transactional step `book` (which calls `body` if given),
    then a plain step `notify`. Returns the journal of what the bodies did."""
    ran: list[str] = []

    @app.transaction(retry=Retry(attempts=3, initial="1s", backoff=1.0))
    def book(entry: str, amount: int) -> int:
        db = durably.connection()
        ledger.insert(db, entry, amount)
        ran.append(f"book {entry}")
        if body is not None:
            return body(db, entry, amount)  # type: ignore[no-any-return]
        return amount

    @app.step
    async def notify(entry: str) -> str:
        ran.append(f"notify {entry}")
        return f"told {entry}"

    @app.workflow
    async def booking(entry: str, amount: int) -> list[Any]:
        booked = await book(entry, amount)
        return [booked, await notify(entry)]

    return ran


def test_the_writes_and_the_outcome_commit_together(app: durably.App, ledger: Ledger) -> None:
    ran = book_app(app, ledger)
    handle = app.start("booking", "e-1", 120, id="b-1")
    app.run_until_idle()

    assert handle.result(timeout=0) == [120, "told e-1"]
    assert ledger.rows() == [("e-1", 120)]
    assert ran == ["book e-1", "notify e-1"]
    assert step_events(app.client.history("b-1")) == [
        ("step_started", 0, "book", 1),
        ("step_completed", 0, "book", 1),
        ("step_started", 1, "notify", 1),
        ("step_completed", 1, "notify", 1),
    ]


def test_a_body_that_raises_leaves_no_row_and_is_retried(
    app: durably.App, ledger: Ledger, clock: FakeClock
) -> None:
    failures = iter([ConnectionError("the ledger service reset")])

    def flaky(db: Any, entry: str, amount: int) -> int:
        error = next(failures, None)
        if error is not None:
            raise error  # after its insert: the insert is rolled back with it
        return amount

    ran = book_app(app, ledger, flaky)
    handle = app.start("booking", "e-2", 7, id="b-2")
    app.run_until_idle()
    assert ledger.rows() == []
    clock.advance("1s")
    app.run_until_idle()

    assert handle.result(timeout=0) == [7, "told e-2"]
    assert ledger.rows() == [("e-2", 7)]
    assert ran == ["book e-2", "book e-2", "notify e-2"]
    assert step_events(app.client.history("b-2"))[:4] == [
        ("step_started", 0, "book", 1),
        ("attempt_failed", 0, "book", 1),
        ("step_started", 0, "book", 2),
        ("step_completed", 0, "book", 2),
    ]


def test_a_terminal_failure_and_a_result_that_would_not_round_trip_write_nothing(
    app: durably.App, ledger: Ledger
) -> None:
    def refuse(db: Any, entry: str, amount: int) -> Any:
        if entry == "refused":
            raise Terminal("the ledger is closed for the year")
        return {1, 2}  # a set is no int: the result would not read back

    book_app(app, ledger, refuse)
    refused = app.start("booking", "refused", 1)
    odd = app.start("booking", "odd", 2)
    app.run_until_idle()

    assert ledger.rows() == []
    assert refused.status() is RunStatus.FAILED
    assert app.client.get(refused.id).error.error_class == "durably.errors.StepFailed"  # type: ignore[union-attr]
    assert odd.status() is RunStatus.FAILED
    assert "PayloadError" in app.client.get(odd.id).error.message  # type: ignore[union-attr]


def test_a_database_error_in_the_body_is_the_steps_failure_not_a_store_outage(
    app: durably.App, ledger: Ledger, store_url: str
) -> None:
    execute_sql(store_url, "INSERT INTO ledger (id, amount) VALUES ('taken', 1)")

    @app.transaction(retry=Retry(attempts=1))
    def book_taken(entry: str) -> None:
        ledger.insert(durably.connection(), entry, 5)

    @app.workflow
    async def booking_taken(entry: str) -> None:
        await book_taken(entry)

    handle = app.start(booking_taken, "taken")
    app.run_until_idle()

    run = app.client.get(handle.id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "IntegrityError" in run.error.message or "UniqueViolation" in run.error.message
    assert ledger.rows() == [("taken", 1)]


def test_a_lease_lost_at_the_commit_rolls_the_writes_back_and_the_next_worker_books_once(
    app: durably.App, ledger: Ledger, clock: FakeClock
) -> None:
    takeovers = iter([True])

    def taken_over(db: Any, entry: str, amount: int) -> int:
        if next(takeovers, False):  # another worker takes the run over, in this transaction
            db.execute(
                f"UPDATE durably_runs SET lease_epoch = lease_epoch + 1 WHERE id = {ledger.mark}",
                ("b-3",),
            )
        return amount

    ran = book_app(app, ledger, taken_over)
    handle = app.start("booking", "e-3", 30, id="b-3")
    app.run_until_idle(lease=DEAD_LEASE)
    assert ledger.rows() == []  # refused at the fence: nothing of it committed
    assert app.client.get("b-3").status is RunStatus.RUNNING  # still leased, to nobody alive

    clock.advance(DEAD_LEASE * 2)
    app.run_until_idle()
    assert handle.result(timeout=0) == [30, "told e-3"]
    assert ledger.rows() == [("e-3", 30)]
    assert ran.count("book e-3") == 2
    completed = [e for e in app.client.history("b-3") if e.kind is EventKind.STEP_COMPLETED]
    assert [e.name for e in completed] == ["book", "notify"]


def test_the_transaction_is_durablys_to_end(app: durably.App, ledger: Ledger) -> None:
    said: list[str] = []

    def meddle(db: Any, entry: str, amount: int) -> int:
        for end in (db.commit, db.rollback, db.close):
            try:
                end()
            except DurablyError as exc:
                said.append(str(exc))
        return amount

    book_app(app, ledger, meddle)
    handle = app.start("booking", "e-4", 4)
    app.run_until_idle()

    assert handle.result(timeout=0) == [4, "told e-4"]
    assert ledger.rows() == [("e-4", 4)]
    assert len(said) == 3
    assert all("return from the step to commit" in message for message in said)
    with pytest.raises(DurablyError, match="outside a transactional step"):
        durably.connection()


def test_a_commit_statement_of_its_own_fails_the_step_for_good(
    app: durably.App, ledger: Ledger
) -> None:
    def commit_early(db: Any, entry: str, amount: int) -> int:
        db.execute("COMMIT")
        return amount

    book_app(app, ledger, commit_early)
    handle = app.start("booking", "e-5", 5)
    app.run_until_idle()

    run = app.client.get(handle.id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert "ended its transaction itself" in run.error.message


def test_an_attempt_past_its_timeout_is_rolled_back_and_retried(
    app: durably.App, ledger: Ledger, clock: FakeClock
) -> None:
    slow: list[threading.Thread] = []  # the thread of the first attempt, the slow one

    @app.transaction(timeout="0.2s", retry=Retry(attempts=2, initial="1s"))
    def book_slowly(entry: str) -> str:
        ledger.insert(durably.connection(), entry, 1)
        if not slow:
            slow.append(threading.current_thread())
            # past its timeout: abandoned, its transaction rolls back. It must end by itself:
            # on SQLite its transaction holds the write lock until it does
            time.sleep(0.6)
        return entry

    @app.workflow
    async def booking_slowly(entry: str) -> str:
        return await book_slowly(entry)  # type: ignore[no-any-return]

    handle = app.start(booking_slowly, "e-6")
    app.run_until_idle()
    assert app.client.get(handle.id).status is RunStatus.PENDING  # waiting for its retry
    [thread] = slow
    thread.join(WAIT)  # the abandoned body ends, and its transaction rolls back
    assert not thread.is_alive()
    assert ledger.rows() == []
    clock.advance("2s")
    app.run_until_idle()

    assert handle.result(timeout=0) == "e-6"
    assert ledger.rows() == [("e-6", 1)]
    failed = [e for e in app.client.history(handle.id) if e.kind is EventKind.STEP_ATTEMPT_FAILED]
    assert len(failed) == 1
    assert "StepTimeout" in (failed[0].data or "")


def test_a_transactional_step_is_refused_in_a_gather_and_as_an_async_def(
    app: durably.App, ledger: Ledger
) -> None:
    book_app(app, ledger)

    @app.workflow
    async def fan(entries: list[str]) -> Any:
        book = app.step_named("book")
        return await durably.gather(*(book(entry, 1) for entry in entries))  # type: ignore[misc]

    handle = app.start(fan, ["a", "b"])
    app.run_until_idle()
    run = app.client.get(handle.id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "runs alone in its run" in run.error.message
    assert ledger.rows() == []

    with pytest.raises(ConfigError, match="is an async def"):

        @app.transaction
        async def nope() -> None: ...


def test_sql_that_failed_and_was_caught_fails_the_attempt_on_postgres_only(
    app: durably.App, ledger: Ledger, store_url: str
) -> None:
    """PostgreSQL aborts a transaction whose statement failed: a body that catches the error
    and returns has written nothing, and its attempt fails (TransactionAborted). SQLite keeps
    the transaction going: the body's other writes commit."""

    @app.transaction(retry=Retry(attempts=1))
    def book_and_shrug(entry: str) -> str:
        db = durably.connection()
        ledger.insert(db, entry, 1)
        try:
            db.execute("INSERT INTO no_such_table VALUES (1)")
        except Exception:  # the body carries on: what was written so far?
            return "shrugged"
        return "unreachable"

    @app.workflow
    async def shrugging(entry: str) -> str:
        return await book_and_shrug(entry)  # type: ignore[no-any-return]

    handle = app.start(shrugging, "e-7")
    app.run_until_idle()

    run = app.client.get(handle.id)
    if store_url.startswith("sqlite"):
        assert handle.result(timeout=0) == "shrugged"
        assert ledger.rows() == [("e-7", 1)]
    else:
        assert run.status is RunStatus.NEEDS_ATTENTION
        assert run.error is not None
        assert "TransactionAborted" in run.error.message
        assert "savepoint" in run.error.message
        assert ledger.rows() == []


def test_a_timed_out_attempt_is_not_unknown_and_takes_no_reconcile_hook(
    app: durably.App, ledger: Ledger, clock: FakeClock
) -> None:
    @app.transaction(timeout="0.1s", retry=Retry(attempts=2, initial="1s"))
    def book_late(entry: str) -> str:
        time.sleep(0.3)  # past its timeout; on SQLite it holds the write lock until it ends
        return entry

    with pytest.raises(ConfigError, match="takes no reconcile hook"):

        @book_late.reconcile
        def find(entry: str) -> str | None:
            return None

    @app.workflow
    async def booking_late(entry: str) -> str:
        return await book_late(entry)  # type: ignore[no-any-return]

    handle = app.start(booking_late, "e-8")
    app.run_until_idle()
    [failed] = [e for e in app.client.history(handle.id) if e.kind is EventKind.STEP_ATTEMPT_FAILED]
    assert '"unknown":false' in (failed.data or "").replace(" ", "")


def test_a_worker_running_many_transactional_steps_holds_few_sqlite_connections(
    sqlite_url: str, clock: FakeClock
) -> None:
    """Each attempt runs in a thread of its own; SQLite connections are per thread: each
    attempt's is closed with its transaction, not kept until the store closes."""
    app = durably.App(sqlite_url, clock=clock)
    try:
        app.store  # noqa: B018
        ledger = Ledger(sqlite_url)
        book_app(app, ledger)
        for n in range(30):
            app.start("booking", f"e-{n}", n)
        app.run_until_idle()

        assert len(ledger.rows()) == 30
        assert len(app.store._db) < 10  # type: ignore[attr-defined]
    finally:
        app.close()
