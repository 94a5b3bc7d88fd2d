"""The app the crash test's worker processes run: `tests.chaos.crash_app:app`.

One workflow of five steps turns a seed into a number. Every step body records that it ran
(the `executions` table, no uniqueness) before it sleeps, and applies its side effect
(the `effects` table, unique on the idempotency key) after, so a SIGKILL can land before
the effect, or between the effect and the checkpoint that records the step.

The tables live outside durably's store: in the SQLite file named by $CHAOS_EFFECTS, or in
the PostgreSQL schema its URL selects (the test passes the store URL itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import durably

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["OPERATIONS", "WORKFLOW", "Ledger", "app", "build_app", "expected_result"]

WORKFLOW = "crunch"


def _add_seven(x: int) -> int:
    return x + 7


def _triple(x: int) -> int:
    return x * 3


def _flip_bits(x: int) -> int:
    return x ^ 0x5A5A


def _subtract(x: int) -> int:
    return x - 1_000


def _square_mod(x: int) -> int:
    return (x * x) % 1_000_003


# Not commutative: a step skipped, repeated into the result or run out of order shows.
OPERATIONS: tuple[Callable[[int], int], ...] = (
    _add_seven,
    _triple,
    _flip_bits,
    _subtract,
    _square_mod,
)


def expected_result(seed: int) -> int:
    value = seed
    for operation in OPERATIONS:
        value = operation(value)
    return value


class Ledger:
    """The outside world the steps act on, in SQLite (a file path) or PostgreSQL (a URL).

    Opened lazily and safe to share between threads: step bodies write through
    `asyncio.to_thread`, so a lock wait never stalls the worker's event loop.
    """

    def __init__(self, url: str | None = None) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None  # created on first PostgreSQL use

    @property
    def url(self) -> str:
        return self._url or os.environ["CHAOS_EFFECTS"]

    @property
    def is_postgres(self) -> bool:
        return self.url.startswith(("postgres://", "postgresql://"))

    def create_tables(self) -> None:
        unique = (
            "CREATE TABLE effects (idempotency_key TEXT NOT NULL UNIQUE,"
            " value BIGINT NOT NULL, pid INTEGER NOT NULL)"
        )
        plain = "CREATE TABLE executions (idempotency_key TEXT NOT NULL, pid INTEGER NOT NULL)"
        if not self.is_postgres:
            with self._sqlite() as db:
                db.execute("PRAGMA journal_mode = WAL")
        self._execute(unique)
        self._execute(plain)

    def record_execution(self, key: str) -> None:
        self._execute("INSERT INTO executions VALUES ({0}, {0})", key, os.getpid())

    def apply_effect(self, key: str, value: int) -> None:
        self._execute(
            "INSERT INTO effects VALUES ({0}, {0}, {0}) ON CONFLICT (idempotency_key) DO NOTHING",
            key,
            value,
            os.getpid(),
        )

    def executions(self) -> Counter[str]:
        """Body executions per idempotency key."""
        rows = self._query("SELECT idempotency_key FROM executions")
        return Counter(str(key) for (key,) in rows)

    def effects(self) -> list[tuple[str, int]]:
        """(idempotency key, value) of every effect row, duplicates included if any."""
        rows = self._query("SELECT idempotency_key, value FROM effects")
        return [(str(key), int(value)) for key, value in rows]

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    # -- connections --------------------------------------------------------------------

    def _execute(self, sql: str, *params: object) -> None:
        placeholder = "%s" if self.is_postgres else "?"
        statement = sql.format(placeholder)
        if self.is_postgres:
            with self._postgres().connection() as pg:
                pg.execute(statement, params)  # the pool's block commits
        else:
            with self._sqlite() as db, db:  # the inner `db` commits the transaction
                db.execute(statement, params)

    def _query(self, sql: str) -> Sequence[tuple[Any, ...]]:
        if self.is_postgres:
            with self._postgres().connection() as pg:
                return pg.execute(sql).fetchall()
        with self._sqlite() as db:
            rows: list[tuple[Any, ...]] = db.execute(sql).fetchall()
            return rows

    @contextlib.contextmanager
    def _sqlite(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.url, timeout=30)  # the busy timeout: wait for other writers
        try:
            yield db
        finally:
            db.close()

    def _postgres(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                self._pool = ConnectionPool(
                    self.url, min_size=1, max_size=4, open=True, name="chaos-ledger"
                )
            return self._pool


def build_app(store: str | None = None, *, ledger: Ledger | None = None) -> durably.App:
    """The crash test's app on `store` (None: $DURABLY_STORE)."""
    app = durably.App(store)
    ledger = ledger or Ledger()

    async def act(value: int) -> int:
        """A step body: count the execution, work a little, apply the keyed effect."""
        key = durably.idempotency_key()
        await asyncio.to_thread(ledger.record_execution, key)
        await asyncio.sleep(random.uniform(0.005, 0.020))
        await asyncio.to_thread(ledger.apply_effect, key, value)
        return value

    @app.step
    async def add_seven(x: int) -> int:
        return await act(_add_seven(x))

    @app.step
    async def triple(x: int) -> int:
        return await act(_triple(x))

    @app.step
    async def flip_bits(x: int) -> int:
        return await act(_flip_bits(x))

    @app.step
    async def subtract(x: int) -> int:
        return await act(_subtract(x))

    @app.step
    async def square_mod(x: int) -> int:
        return await act(_square_mod(x))

    @app.workflow(name=WORKFLOW)
    async def crunch(seed: int) -> int:
        value = await add_seven(seed)
        value = await triple(value)
        value = await flip_bits(value)
        value = await subtract(value)
        result: int = await square_mod(value)
        return result

    return app


app = build_app()
