"""Bad stored data never takes a worker down: an event of a kind a newer durably wrote, or a
stored row that cannot be read, parks its own run with the reason (nothing of it runs), the
history still reads and shows whole, and the other runs claimed with it go on. (Corrupt
payloads and inputs that no longer fit: tests/integration/test_failures.py.)"""

from __future__ import annotations

from pathlib import Path

import durably
from durably import RunStatus
from durably.core.history import UNREADABLE_ROW, EventKind
from durably.testing import FakeClock

from .conftest import execute_sql
from .test_cli import durably_cli


def two_sleepers(app: durably.App, ran: list[str]) -> None:
    @app.step
    async def a(n: int) -> int:
        ran.append(f"a {n}")
        return n

    @app.workflow
    async def flow(n: int) -> int:
        await a(n)
        await durably.sleep("1h")
        return await a(n + 1)  # type: ignore[no-any-return]

    app.start(flow, 1, id="bad")
    app.start(flow, 10, id="good")
    app.run_until_idle()  # both asleep, after a(n)


def append_row(app: durably.App, run_id: str, kind: str, at: object) -> int:
    """A row appended to the run's history behind the engine's back; its seq."""
    store_url = app.store_url or ""
    seq = max(e.seq for e in app.client.history(run_id)) + 1
    # PostgreSQL's history rows carry their run's birth (durably.stores.postgres.partitions)
    born = ("", "") if store_url.startswith("sqlite") else (", born", ", created_at")
    execute_sql(
        store_url,
        f"INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data"
        f"{born[0]}) SELECT ?, ?, ?, ?, NULL, NULL, NULL, NULL{born[1]}"
        " FROM durably_runs WHERE id = ?",
        [run_id, seq, kind, at, run_id],
    )
    execute_sql(store_url, "UPDATE durably_runs SET event_count = ? WHERE id = ?", [seq, run_id])
    return seq


def test_an_event_kind_from_a_newer_durably_parks_only_its_run(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    ran: list[str] = []
    two_sleepers(app, ran)
    now = app.client.history("bad")[-1].at.timestamp()
    seq = append_row(app, "bad", "workflow_event_set", now)
    clock.advance("1h")
    app.run_until_idle()

    assert app.client.get("good").status is RunStatus.COMPLETED  # the rest keep running
    run = app.client.get("bad")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.PayloadError"
    assert f"event #{seq} has the kind 'workflow_event_set'" in run.error.message
    assert "a newer durably wrote it" in run.error.message
    assert ran == ["a 1", "a 10", "a 11"]  # nothing of the bad run ran
    history = app.client.history("bad")
    unknown = next(e for e in history if e.seq == seq)
    assert str(unknown.kind) == "workflow_event_set"  # read whole, under its own name
    assert not unknown.kind.known
    assert EventKind.STEP_COMPLETED.known
    shown = durably_cli("runs", "show", "bad", "--store", store_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "workflow_event_set" in shown.stdout


def test_a_row_that_cannot_be_read_parks_only_its_run(sqlite_url: str, clock: FakeClock) -> None:
    """SQLite only: PostgreSQL's typed columns cannot hold such a row."""
    app = durably.App(sqlite_url, clock=clock)
    ran: list[str] = []
    try:
        two_sleepers(app, ran)
        seq = append_row(app, "bad", "step_completed", "garbage")
        clock.advance("1h")
        app.run_until_idle()
        check_parked_alone(app, seq, ran)
    finally:
        app.close()


def check_parked_alone(app: durably.App, seq: int, ran: list[str]) -> None:
    assert app.client.get("good").status is RunStatus.COMPLETED
    run = app.client.get("bad")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert f"event #{seq} cannot be read from the store" in run.error.message, run.error
    assert "'garbage'" in run.error.message
    assert ran == ["a 1", "a 10", "a 11"]
    [placeholder] = [e for e in app.client.history("bad") if e.seq == seq]
    assert placeholder.kind == UNREADABLE_ROW
