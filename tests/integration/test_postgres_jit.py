"""durably's PostgreSQL sessions never JIT-compile a statement. PostgreSQL compiles one whose
estimated cost passes jit_above_cost, and the estimates of a claim's pick grow with the table:
beside 10,000,000 runs a claim of one took 20 ms, nearly all of it compiling, against 1.2 to
1.7 ms with JIT off (docs/performance.md, "Large stores"). Here the thresholds are set to 0
for the session, so that the server would compile any statement: a plain connection does, the
store's connections do not."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from durably.stores.postgres.store import PostgresStore
from tests.conftest import unavailable

pytestmark = pytest.mark.postgres

_COMPILE_EVERYTHING = "%20-cjit_above_cost%3D0%20-cjit_optimize_above_cost%3D0"
_PLAN = "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM durably_runs WHERE status = 'x'"


def _compiled(db: psycopg.Connection[Any]) -> bool:
    """Whether the server JIT-compiled the statement: its plan says how, if it did."""
    row = db.execute(_PLAN).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return "JIT" in plan[0]


def test_the_store_s_sessions_never_jit_compile_whatever_the_cost(postgres_url: str) -> None:
    url = postgres_url + _COMPILE_EVERYTHING  # its options end with the test's search_path
    store = PostgresStore(url)
    try:
        with psycopg.connect(url, autocommit=True) as plain:
            if not _compiled(plain):
                unavailable("this PostgreSQL server has no JIT (llvmjit)", "the JIT test")
        assert store._db.run(_compiled) is False
        assert store._db.run(lambda db: db.execute("SHOW jit").fetchone()) == ("off",)
    finally:
        store.close()
