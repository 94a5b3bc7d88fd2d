"""Fake outside services for the order demo: a payment API, a warehouse, a carrier, a mailer.

They keep their state in a SQLite file of their own (not durably's store), so what they did
survives a worker that is killed, and the demo can count duplicate charges afterwards.
Each service honours idempotency keys the way real payment APIs do: a repeated key returns
the first answer instead of acting twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from pathlib import Path

__all__ = ["Services"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    service TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    order_id TEXT NOT NULL,
    answer TEXT NOT NULL,
    PRIMARY KEY (service, idempotency_key)
);
CREATE TABLE IF NOT EXISTS calls (service TEXT NOT NULL, idempotency_key TEXT NOT NULL);
"""


class Services:
    """All four fake services over one SQLite file; `latency` is each call's delay."""

    def __init__(self, path: str | Path, *, latency: float = 0.02) -> None:
        self.path = str(path)
        self.latency = latency
        with self._db() as db:
            db.executescript(_SCHEMA)

    async def call(self, service: str, order_id: str, key: str, answer: str) -> str:
        """Do `service`'s effect once per key; a repeat returns the first answer."""
        await asyncio.sleep(self.latency * random.uniform(0.5, 1.5))
        with self._db() as db:
            db.execute("INSERT INTO calls VALUES (?, ?)", (service, key))
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
            calls = db.execute("SELECT count(*) FROM calls").fetchone()[0]
            effects = db.execute("SELECT count(*) FROM effects").fetchone()[0]
            charges = db.execute(
                "SELECT count(*) FROM effects WHERE service = 'payments'"
            ).fetchone()[0]
            duplicate_charges = db.execute(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM effects"
                " WHERE service = 'payments' GROUP BY order_id)"
            ).fetchone()[0]
        return {
            "calls": calls,
            "effects": effects,
            "charges": charges,
            "duplicate_charges": duplicate_charges,
        }

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode = WAL")
        return db


def from_environment() -> Services:
    return Services(os.environ.get("DEMO_SERVICES", "demo-services.db"))
