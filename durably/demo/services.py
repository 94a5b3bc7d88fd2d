"""Fake outside services for the order demo: a payment API, a warehouse, a carrier, a mailer.

They keep their state in a SQLite file of their own (not durably's store), so what they did
survives a worker that is killed, and the demo can count duplicate charges afterwards.
Each honours idempotency keys the way real payment APIs do: a repeated key returns the
first answer instead of acting twice. Faults are decided by a hash of (service, order,
how many times this key was called), so every worker process sees the same faults.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from durably import Terminal, Throttled

__all__ = ["FaultRates", "Services", "from_environment"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    service TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    order_id TEXT NOT NULL,
    answer TEXT NOT NULL,
    PRIMARY KEY (service, idempotency_key)
);
CREATE TABLE IF NOT EXISTS calls (service TEXT NOT NULL, idempotency_key TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (charge_id TEXT PRIMARY KEY, order_id TEXT NOT NULL);
"""


@dataclass(frozen=True)
class FaultRates:
    transient: float = 0.06  # connection reset before the call is handled
    throttled: float = 0.05  # the carrier says "slow down"
    slow_after_success: float = 0.03  # the payment goes through, the answer comes too late
    out_of_stock: float = 0.04  # a business "no": terminal
    mailer_down: float = 0.015  # the mailer rejects this order every time: a dead letter


class Services:
    """All four fake services over one SQLite file."""

    def __init__(
        self, path: str | Path, *, latency: float = 0.02, faults: FaultRates | None = None
    ) -> None:
        self.path = str(path)
        self.latency = latency
        self.faults = faults or FaultRates()
        with self._db() as db:
            db.executescript(_SCHEMA)

    async def charge(self, order_id: str, amount: int, key: str) -> str:
        if self._roll("payments-slow", order_id, key) < self.faults.slow_after_success:
            answer = await self._effect(
                "payments", order_id, key, f"ch_{order_id}", transient=False
            )
            await asyncio.sleep(1.0)  # the charge is made; the reply comes after the step's timeout
            return answer
        return await self._effect("payments", order_id, key, f"ch_{order_id}")

    def find_charge(self, order_id: str) -> str | None:
        with self._db() as db:
            row = db.execute(
                "SELECT answer FROM effects WHERE service = 'payments' AND order_id = ?",
                (order_id,),
            ).fetchone()
        return None if row is None else str(row[0])

    def refund(self, order_id: str, charge_id: str) -> None:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?)", (charge_id, order_id))

    async def reserve(self, order_id: str, key: str) -> str:
        if self._roll("warehouse-stock", order_id, "") < self.faults.out_of_stock:
            raise Terminal(f"order {order_id}: out of stock")
        return await self._effect("warehouse", order_id, key, f"res_{order_id}")

    async def label(self, order_id: str, key: str) -> str:
        calls = self._count_calls("carrier", key)
        if self._roll("carrier-throttle", order_id, f"{key}#{calls}") < self.faults.throttled:
            self._record_call("carrier", key)
            raise Throttled("carrier: too many requests", retry_after="200ms")
        return await self._effect("carrier", order_id, key, f"lbl_{order_id}")

    async def email(self, order_id: str, key: str, label: str) -> str:
        if self._roll("mailer-down", order_id, "") < self.faults.mailer_down:
            self._record_call("mailer", key)
            raise ConnectionError(f"mailer: 503 for order {order_id}")
        return await self._effect("mailer", order_id, key, f"mail_{order_id}_{label}")

    async def _effect(
        self, service: str, order_id: str, key: str, answer: str, *, transient: bool = True
    ) -> str:
        """Do `service`'s effect once per key; a repeat returns the first answer."""
        await asyncio.sleep(self.latency)
        calls = self._record_call(service, key)
        if transient and self._roll(service, order_id, f"{key}#{calls}") < self.faults.transient:
            raise ConnectionError(f"{service}: connection reset")
        with self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?)",
                (service, key, order_id, answer),
            )
            row = db.execute(
                "SELECT answer FROM effects WHERE service = ? AND idempotency_key = ?",
                (service, key),
            ).fetchone()
        return str(row[0])

    def report(self) -> dict[str, int]:
        with self._db() as db:

            def one(sql: str) -> int:
                return int(db.execute(sql).fetchone()[0])

            return {
                "calls": one("SELECT count(*) FROM calls"),
                "charges": one("SELECT count(*) FROM effects WHERE service = 'payments'"),
                "duplicate_charges": one(
                    "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM effects"
                    " WHERE service = 'payments' GROUP BY order_id)"
                ),
                "refunds": one("SELECT count(*) FROM refunds"),
            }

    def _record_call(self, service: str, key: str) -> int:
        with self._db() as db:
            db.execute("INSERT INTO calls VALUES (?, ?)", (service, key))
        return self._count_calls(service, key)

    def _count_calls(self, service: str, key: str) -> int:
        with self._db() as db:
            return int(
                db.execute(
                    "SELECT count(*) FROM calls WHERE service = ? AND idempotency_key = ?",
                    (service, key),
                ).fetchone()[0]
            )

    @staticmethod
    def _roll(*parts: str) -> float:
        digest = hashlib.sha256("|".join(parts).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode = WAL")
        return db


def from_environment() -> Services:
    return Services(os.environ.get("DEMO_SERVICES", "demo-services.db"))
