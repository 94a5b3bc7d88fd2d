"""The app test_reconcile_and_undo's worker processes run: `tests.chaos.checkout_app:app`.

`checkout(order)` reserves stock, charges, then confirms; an order named "reject-..." is
refused at confirmation, so the charge is refunded and the stock released. Every body, hook
and undo writes to a ledger (a SQLite file named by $CHECKOUT_LEDGER) outside durably's
store: `calls` counts executions, `effects` holds each keyed side effect once.

How a worker misbehaves is set by its environment:
  CHECKOUT_CRASH_AFTER=charge   the process dies after the charge body, before the checkpoint
  CHECKOUT_LATE_CHARGE=1        the first charge attempt charges, then answers too late
  CHECKOUT_HANG_UNDO=refund     the refund applies its effect, then hangs (to be SIGKILLed)
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from contextlib import closing

import durably
from durably import Retry, Terminal
from durably.testing import Faults

__all__ = ["Ledger", "app", "build_app"]


class Ledger:
    def __init__(self, path: str | None = None) -> None:
        self._path = path

    @property
    def path(self) -> str:
        return self._path or os.environ["CHECKOUT_LEDGER"]

    def create(self) -> None:
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("CREATE TABLE calls (what TEXT NOT NULL, key TEXT NOT NULL)")
            db.execute("CREATE TABLE effects (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def call(self, what: str, key: str) -> int:
        """Record one execution; return how many times `what` ran under `key`, this one too."""
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute("INSERT INTO calls VALUES (?, ?)", (what, key))
            (count,) = db.execute(
                "SELECT count(*) FROM calls WHERE what = ? AND key = ?", (what, key)
            ).fetchone()
        return int(count)

    def apply(self, key: str, value: str) -> str:
        """Apply a keyed effect once; return the value that holds for the key."""
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute(
                "INSERT INTO effects VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, value)
            )
        return self.effect(key) or value

    def effect(self, key: str) -> str | None:
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            row = db.execute("SELECT value FROM effects WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def calls(self) -> list[tuple[str, str]]:
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            return [
                (str(what), str(key)) for what, key in db.execute("SELECT what, key FROM calls")
            ]

    def effects(self) -> dict[str, str]:
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            return {
                str(key): str(value) for key, value in db.execute("SELECT key, value FROM effects")
            }


def build_app(store: str | None = None, *, ledger: Ledger | None = None) -> durably.App:
    faults = Faults()
    if os.environ.get("CHECKOUT_CRASH_AFTER"):
        faults.crash_after(os.environ["CHECKOUT_CRASH_AFTER"])
    app = durably.App(store, hooks=[faults])
    book = ledger or Ledger()

    @app.step
    async def reserve(order: str) -> str:
        key = durably.idempotency_key()
        book.call("reserve", key)
        return book.apply(key, f"res-{order}")

    @reserve.compensation
    async def release(order: str, reservation: str) -> None:
        key = durably.idempotency_key()
        book.call("release", key)
        book.apply(key, f"released {reservation}")

    @app.step(timeout="300ms", retry=Retry(attempts=5, initial="100ms", jitter="none"))
    async def charge(order: str) -> str:
        key = durably.idempotency_key()
        runs = book.call("charge", key)
        charged = book.apply(key, f"ch-{order}")
        if runs == 1 and os.environ.get("CHECKOUT_LATE_CHARGE"):
            await asyncio.sleep(3)  # charged, but the answer comes after the timeout
        return charged

    @charge.reconcile
    async def find_charge(order: str) -> str | None:
        key = durably.idempotency_key()
        book.call("find_charge", key)
        return book.effect(key)

    @charge.compensation
    async def refund(order: str, charge_id: str) -> None:
        key = durably.idempotency_key()
        book.call("refund", key)
        book.apply(key, f"refunded {charge_id}")
        if os.environ.get("CHECKOUT_HANG_UNDO") == "refund":
            await asyncio.sleep(600)  # stuck after the effect, before its checkpoint

    @app.step
    async def confirm(order: str) -> str:
        if order.startswith("reject"):
            raise Terminal(f"{order} is refused")
        return f"confirmed {order}"

    @app.workflow
    async def checkout(order: str) -> str:
        await reserve(order)
        charge_id: str = await charge(order)
        await confirm(order)
        return charge_id

    return app


app = build_app()
