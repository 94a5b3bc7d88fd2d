"""The benchmarks' fill tool (benchmarks/fill.py) writes what durably writes, on both stores:
its runs are row for row those a worker writes for the same starts, they read back through the
client, the explanations and `durably runs list`/`show` as they were filled, a worker runs new
runs beside them, and retention deletes them."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import durably
from benchmarks.fill import WORKFLOWS, Plan, fill, store_size
from durably import RunStatus
from durably.core.event_data import payload_of
from durably.core.history import EventKind
from durably.errors import WorkflowFailed
from durably.views.explaining import explain

from .conftest import sql_rows
from .test_cli import durably_cli

RUNS = 100  # two rounds of 50: completed runs of 19 events, then of 21


def real_app(url: str, *, fail: bool) -> durably.App:
    """An app whose workflows are the fill's: name(x, steps), each step adding one to x; with
    `fail`, each raises after its steps, as the fill's failed runs did."""
    app = durably.App(url)
    for workflow, step_name in WORKFLOWS:

        async def add_one(x: int) -> int:
            return x + 1

        step = app.step(name=step_name)(add_one)

        def body(step: durably.Step = step) -> Any:
            async def run(x: int, steps: int) -> int:
                for _ in range(steps):
                    x = await step(x)
                if fail:
                    raise ValueError(f"gave up at {x}")
                return x

            return run

        app.workflow(name=workflow)(body())
    return app


def named_rows(url: str, sql: str, params: list[object]) -> list[dict[str, Any]]:
    """Rows as dicts by column name (`?` placeholders)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            cursor = db.execute(sql, params)
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor]
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        found = pg.execute(sql.replace("?", "%s"), params)
        names = [c.name for c in found.description or []]
        return [dict(zip(names, row, strict=True)) for row in found.fetchall()]


def keyed_by_run(url: str) -> list[str]:
    """Every durably table with a run_id column but the events and the audit trail."""
    if url.startswith("sqlite:///"):
        query = (
            "SELECT m.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS c"
            " WHERE m.type = 'table' AND c.name = 'run_id'"
        )
    else:
        query = (
            "SELECT table_name FROM information_schema.columns"
            " WHERE column_name = 'run_id' AND table_schema = current_schema()"
        )
    found = {name for (name,) in sql_rows(url, query)} - {"durably_audit"}
    # PostgreSQL's history partitions (durably_events_<day>) are the history too
    tables = {name for name in found if not name.startswith("durably_events")}
    assert {"durably_inbox", "durably_attributes"} <= tables
    return sorted(tables)


def normal(data: str | None, run_id: str) -> object:
    """An event's data without what differs from run to run: ids, owners, times, files."""
    if data is None:
        return None
    found = json.loads(data.replace(run_id, "RUN"))
    if isinstance(found, dict):
        for key in ("owner", "id", "sent_at"):
            if key in found:
                found[key] = key.upper()
        if "traceback" in found:
            where = r'File "[^"]+", line \d+, in \w+'
            found["traceback"] = re.sub(where, "FILE", found["traceback"])
    return found


def written(url: str, run_id: str) -> dict[str, object]:
    """What the store holds of a run, ids, times and versions left out (their order checked)."""
    [run] = named_rows(url, "SELECT * FROM durably_runs WHERE id = ?", [run_id])
    events = named_rows(url, "SELECT * FROM durably_events WHERE run_id = ? ORDER BY seq", [run_id])
    audit = named_rows(url, "SELECT * FROM durably_audit WHERE run_id = ?", [run_id])
    times = [run["created_at"], *(event["at"] for event in events)]
    assert times == sorted(times)
    assert times[-1] <= run["updated_at"]
    assert (events[1]["kind"], events[1]["at"]) == ("claimed", run["began_at"])
    assert [event["seq"] for event in events] == list(range(1, run["event_count"] + 1))
    assert all(entry["at"] <= run["began_at"] for entry in audit)  # cancelled before a claim
    varying = ("id", "created_at", "updated_at", "began_at", "version")
    return {
        "run": {column: value for column, value in run.items() if column not in varying},
        "events": [
            (e["seq"], e["kind"], e["position"], e["name"], e["attempt"], normal(e["data"], run_id))
            for e in events
        ],
        "audit": [(a["actor"], a["action"], a["via"], a["workflow"], a["detail"]) for a in audit],
        "elsewhere": {
            table: sql_rows(url, f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id])[0][0]
            for table in keyed_by_run(url)
        },
    }


def said(app: durably.App, run_id: str) -> str:
    """The run's explanation, its id and times left out."""
    sentence = explain(app.client.get(run_id), app.client.history(run_id)).sentence
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "TIME", sentence.replace(run_id, "RUN"))


def test_filled_runs_are_what_a_worker_writes_for_the_same_starts(store_url: str) -> None:
    fill(store_url, Plan(RUNS, batch=16))
    reader = durably.App(store_url)
    page = reader.client.runs(limit=RUNS).runs
    picked = {(run.status, run.event_count): run for run in reversed(page)}  # the first filled
    assert set(picked) == {
        (RunStatus.COMPLETED, 19),
        (RunStatus.COMPLETED, 21),
        (RunStatus.FAILED, 20),
        (RunStatus.CANCELLED, 5),
    }
    filled_ids = [
        json.loads(event.data or "{}")["id"]
        for run in page
        if run.status is RunStatus.CANCELLED
        for event in reader.client.history(run.id)
        if event.kind is EventKind.MESSAGE_RECEIVED
    ]
    for (status, _), filled in picked.items():
        x, steps = json.loads(filled.input)["args"]
        app = real_app(store_url, fail=status is RunStatus.FAILED)
        handle = app.start(filled.workflow, x, steps)
        if status is RunStatus.CANCELLED:
            app.client.cancel(handle.id)
        assert app.run_until_idle() == 1  # the new run alone: the filled ones have ended
        assert app.client.get(handle.id).status is status
        assert written(store_url, filled.id) == written(store_url, handle.id)
        assert said(app, filled.id) == said(app, handle.id)
        if status is RunStatus.CANCELLED:  # its message took an inbox id after the fill's
            [message] = [
                e for e in app.client.history(handle.id) if e.data and '"sent_at"' in e.data
            ]
            assert json.loads(message.data or "{}")["id"] > max(filled_ids)
        app.close()
    reader.close()


def test_a_filled_store_reads_back_through_the_client_and_the_cli(
    store_url: str, tmp_path: Path
) -> None:
    end = time.time()
    filled = fill(store_url, Plan(RUNS, events_per_run=20, days=30, end=end, batch=16))
    app = durably.App(store_url)
    page = app.client.runs(limit=RUNS + 1)
    runs = page.runs
    assert page.next_cursor is None
    assert len(runs) == RUNS == filled.runs
    assert Counter(run.status for run in runs) == {
        RunStatus.COMPLETED: 94,
        RunStatus.FAILED: 4,
        RunStatus.CANCELLED: 2,
    }
    assert {run.workflow for run in runs} == {workflow for workflow, _ in WORKFLOWS}
    assert sum(run.event_count for run in runs) == filled.events
    updated = [(run.updated_at, run.id) for run in runs]
    assert updated == sorted(updated, reverse=True)  # newest first
    earliest = datetime.fromtimestamp(end, UTC) - timedelta(days=30)
    assert min(run.created_at for run in runs) >= earliest
    assert max(run.updated_at for run in runs) <= datetime.fromtimestamp(end + 1, UTC)
    assert max(run.created_at for run in runs) > earliest + timedelta(days=29)  # spread
    histories = app.store.histories([run.id for run in runs])
    for run in runs:
        history = histories[run.id]
        assert history == app.client.history(run.id)
        assert [event.seq for event in history] == list(range(1, run.event_count + 1))
        for event in history:
            assert event.kind.known
            payload_of(event)  # every event's data reads as its kind's
        assert (run.available_at, run.lease_owner, run.lease_epoch) == (None, None, 1)
        x, steps = json.loads(run.input)["args"]
        results = [e.data for e in history if e.kind is EventKind.STEP_COMPLETED]
        assert results == [str(n) for n in range(x + 1, x + steps + 1)]
        handle = app.handle(run.id)
        if run.status is RunStatus.COMPLETED:
            assert handle.result(timeout=0) == x + steps
            assert explain(run, history).now.startswith("completed at")
        else:
            with pytest.raises(WorkflowFailed):
                handle.result(timeout=0)
            assert explain(run, history).now.startswith(str(run.status))
    failed = app.client.runs(status=RunStatus.FAILED, limit=10).runs
    assert [run.error and run.error.error_class for run in failed] == ["ValueError"] * 4
    assert store_size(store_url) > 0
    app.close()

    listed = durably_cli("runs", "list", "--store", store_url, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    shown = json.loads(listed.stdout)
    assert [run["id"] for run in shown["runs"]] == [run.id for run in runs[:50]]
    assert shown["next_cursor"]
    details = durably_cli("runs", "show", failed[0].id, "--store", store_url, cwd=tmp_path)
    assert details.returncode == 0, details.stderr
    assert f"gave up at {json.loads(failed[0].input)['args'][0] + 8}" in details.stdout


def test_a_worker_runs_new_runs_on_a_filled_store_and_retention_deletes_the_filled(
    store_url: str,
) -> None:
    day_ago = time.time() - 86_400
    fill(store_url, Plan(RUNS, days=10, end=day_ago, batch=16))
    app = real_app(store_url, fail=False)
    handles = [app.start(workflow, n, 3) for n, (workflow, _) in enumerate(WORKFLOWS)]
    assert app.run_until_idle() == len(WORKFLOWS)
    assert [handle.result(timeout=0) for handle in handles] == [n + 3 for n in range(5)]
    half_a_day_ago = datetime.fromtimestamp(day_ago + 43_200, UTC)
    assert app.store.prune(half_a_day_ago, limit=1_000) == RUNS
    assert {run.id for run in app.client.runs(limit=RUNS).runs} == {h.id for h in handles}
    assert sql_rows(store_url, "SELECT count(DISTINCT run_id) FROM durably_events") == [(5,)]
    app.close()
