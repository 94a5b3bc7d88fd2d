"""The due runs a claim may take, led by what the claiming worker serves, the same SQL for
both stores (with each database's way of saying it).

A worker serves some workflows, each at some versions (durably.stores.records.Serves). Its
claim reads one range of the claimable index (workflow, version, claim rank) for each
workflow and version it serves, and one for each workflow's runs of no recorded version,
each in claim order and cut at the claim's limit, then keeps the first of them all. A due
run of a workflow or a version it does not serve lies in another range: however many there
are, the claim never reads them. What a claim costs grows with what the worker serves and
with its limit, not with the store's backlog.

PostgreSQL reads the ranges in one statement whose text does not change with the worker
(a lateral join over arrays of names and versions); SQLite, which has neither, in a union
of one small select per range, cut into statements of at most `_RANGES` ranges (SQLite
takes at most 500 selects in one union).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any

from durably.stores.records import Serves
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.schema import CLAIM_RANK

__all__ = ["Due", "due_statements", "pick_due"]

# What a pick gives: the run's id, status and lease owner before it, and its claim rank.
Due = tuple[str, str, str | None, float]

_RANGES = 200  # the index ranges one SQLite statement reads (a union of as many selects)

# One range: a workflow's runs at one version (or of none recorded: `version IS NULL`), due
# now and meeting the claim's condition, in claim order. Ordered by the version first, which
# is one value in the range, so that PostgreSQL reads the index in its order for a range of
# no version too instead of sorting the range. `{lock}` (PostgreSQL: FOR UPDATE SKIP LOCKED)
# skips the runs another claim holds, range by range, so that two claims take different runs.
_RANGE = (
    "SELECT id, status, lease_owner, {rank} AS due_rank FROM durably_runs"
    " WHERE workflow = {workflow} AND {version}"
    " AND {rank} <= {mark} AND available_at <= {mark} AND {condition}"
    " ORDER BY {order} LIMIT {mark}{lock}"
)
_IN_ORDER = f"version, {CLAIM_RANK}"  # a range of one version (or none)
_ANY_ORDER = CLAIM_RANK  # a workflow's every version: sorted (a tool's claim, not a worker's)


def due_statements(
    dialect: Dialect,
    workflows: Serves,
    condition: tuple[str, list[object]],
    *,
    now: float,
    limit: int,
    lock: str,
) -> list[tuple[str, list[object]]]:
    """Statements that together select (id, status, lease owner, rank) of up to `limit` due
    runs each, of the served `workflows` that meet `condition`, in claim order: one on
    PostgreSQL; on SQLite, one per `_RANGES` ranges (merge them: `pick_due`)."""
    if dialect.arrays:
        return [_lateral(dialect, workflows, condition, now=now, limit=limit, lock=lock)]
    ranges = _ranges(workflows)
    return [
        _union(dialect, chunk, condition, now=now, limit=limit, lock=lock)
        for chunk in _chunks(ranges, _RANGES)
    ]


def pick_due(
    db: Connection,
    dialect: Dialect,
    workflows: Serves,
    condition: tuple[str, list[object]],
    *,
    now: float,
    limit: int,
    lock: str,
) -> list[Due]:
    """Up to `limit` due runs of the served workflows that meet `condition`, in claim order
    (the first of each statement's, merged)."""
    found = [
        [(row[0], row[1], row[2], row[3]) for row in db.execute(sql, params).fetchall()]
        for sql, params in due_statements(
            dialect, workflows, condition, now=now, limit=limit, lock=lock
        )
    ]
    if len(found) == 1:
        return found[0]
    return list(islice(heapq.merge(*found, key=lambda due: due[3]), limit))


def _ranges(workflows: Serves) -> list[tuple[str, str | None, bool]]:
    """(workflow, version, any version) of each range a claim reads: each version served and
    no version, per workflow; or, for a plain collection of names (a tool's claim: every
    version), the workflow's whole range."""
    if not isinstance(workflows, Mapping):
        return [(name, None, True) for name in workflows]
    ranges: list[tuple[str, str | None, bool]] = []
    for name, versions in workflows.items():
        ranges += [(name, version, False) for version in versions]
        ranges.append((name, None, False))
    return ranges


def _union(
    dialect: Dialect,
    ranges: Sequence[tuple[str, str | None, bool]],
    condition: tuple[str, list[object]],
    *,
    now: float,
    limit: int,
    lock: str,
) -> tuple[str, list[object]]:
    which, more = condition
    mark = dialect.mark
    selects: list[str] = []
    params: list[object] = []
    for name, version, any_version in ranges:
        if any_version:
            on_version, values = "1 = 1", [name]
        elif version is None:
            on_version, values = "version IS NULL", [name]
        else:
            on_version, values = f"version = {mark}", [name, version]
        arm = _range(mark, mark, on_version, which, lock, every_version=any_version)
        selects.append(f"SELECT * FROM ({arm}) AS r{len(selects)}")
        params += [*values, now, now, *more, limit]
    sql = f"{' UNION ALL '.join(selects)} ORDER BY due_rank LIMIT {mark}"
    return sql, [*params, limit]


def _lateral(
    dialect: Dialect,
    workflows: Serves,
    condition: tuple[str, list[object]],
    *,
    now: float,
    limit: int,
    lock: str,
) -> tuple[str, list[object]]:
    """PostgreSQL: each range a lateral select over the arrays of what is served."""
    which, more = condition
    mark = dialect.mark

    def arm(version: str, names: str, *, every_version: bool = False) -> str:
        inner = _range(mark, "s.workflow", version, which, lock, every_version=every_version)
        return f"SELECT c.* FROM {names} CROSS JOIN LATERAL ({inner}) AS c"

    each: list[object] = [now, now, *more, limit]
    if not isinstance(workflows, Mapping):
        names = f"unnest({mark}::text[]) AS s(workflow)"
        whole = arm("1 = 1", names, every_version=True)
        sql = f"SELECT * FROM ({whole}) AS due ORDER BY due_rank LIMIT {mark}"
        return sql, [list(workflows), *each, limit]
    pairs = [(name, version) for name, versions in workflows.items() for version in versions]
    versioned = arm(
        "version = s.version", f"unnest({mark}::text[], {mark}::text[]) AS s(workflow, version)"
    )
    unversioned = arm("version IS NULL", f"unnest({mark}::text[]) AS s(workflow)")
    sql = (
        f"SELECT * FROM ({versioned} UNION ALL {unversioned}) AS due ORDER BY due_rank LIMIT {mark}"
    )
    params: list[Any] = [[name for name, _ in pairs], [version for _, version in pairs], *each]
    return sql, [*params, list(workflows), *each, limit]


def _range(
    mark: str, workflow: str, version: str, condition: str, lock: str, *, every_version: bool
) -> str:
    """One range's select: `workflow` and `version` say which (SQL: a parameter, a column)."""
    order = _ANY_ORDER if every_version else _IN_ORDER
    return _RANGE.format(
        rank=CLAIM_RANK,
        workflow=workflow,
        version=version,
        mark=mark,
        condition=condition,
        order=order,
        lock=lock,
    )


def _chunks(
    ranges: Sequence[tuple[str, str | None, bool]], size: int
) -> list[Sequence[tuple[str, str | None, bool]]]:
    return [ranges[start : start + size] for start in range(0, len(ranges), size)]
