"""Runs' custom attributes (durably.core.attributes), the same SQL for both stores: written
with a run, read for a page of runs, and deleted with pruned runs (searching by them is a
filter of the runs' query: durably.stores.sql.reads). Each function runs inside the caller's
transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from durably.stores.sql.reads import Connection, Dialect

__all__ = ["forget", "insert", "read"]


def insert(db: Connection, dialect: Dialect, run_id: str, attributes: Mapping[str, str]) -> None:
    """Record the attributes of the run `run_id`, just created, in one statement."""
    if not attributes:
        return
    row = f"({dialect.mark}, {dialect.mark}, {dialect.mark})"
    params = [part for name, value in attributes.items() for part in (run_id, name, value)]
    db.execute(
        "INSERT INTO durably_attributes (run_id, name, value)"
        f" VALUES {', '.join([row] * len(attributes))}",
        params,
    )


def read(db: Connection, dialect: Dialect, run_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """The attributes of each of these runs, by name (a run without any is left out)."""
    found: dict[str, dict[str, str]] = {}
    if not run_ids:
        return found
    which, params = dialect.one_of("run_id", list(run_ids))
    rows = db.execute(
        f"SELECT run_id, name, value FROM durably_attributes WHERE {which} ORDER BY run_id, name",
        params,
    )
    for run_id, name, value in rows:
        found.setdefault(run_id, {})[name] = value
    return found


def forget(db: Connection, dialect: Dialect, run_ids: Sequence[str]) -> None:
    """Delete the attributes of those of these runs that are gone (pruning deleted them; a
    run a person acted on meanwhile was kept, and keeps its attributes)."""
    which, params = dialect.one_of("run_id", list(run_ids))
    db.execute(
        f"DELETE FROM durably_attributes WHERE {which} AND NOT EXISTS"
        " (SELECT 1 FROM durably_runs WHERE durably_runs.id = durably_attributes.run_id)",
        params,
    )
