"""Priorities on both stores: a worker under a backlog runs higher-priority runs first, a run
that has waited long enough is not overtaken (no starvation), and the priority comes from the
start, the workflow's default, or a child's parent; a restart keeps it; bad values are
refused with what a priority is."""

from __future__ import annotations

from pathlib import Path

import pytest

import durably
from durably import DurablyError
from durably.core.priority import MAX_PRIORITY
from durably.testing import FakeClock

from .test_cli import durably_cli


def journal_app(app: durably.App, ran: list[str]) -> None:
    @app.step
    async def work(label: str) -> str:
        ran.append(label)
        return label

    @app.workflow
    async def job(label: str) -> str:
        return await work(label)  # type: ignore[no-any-return]

    @app.workflow(priority=7)
    async def urgent_job(label: str) -> str:
        return await work(label)  # type: ignore[no-any-return]

    @app.workflow
    async def parent(label: str) -> list[str]:
        inherited = await durably.start_child(job, f"{label}/inherits")
        chosen = await durably.start_child(job, f"{label}/chosen", priority=2)
        own = await durably.start_child(urgent_job, f"{label}/own")
        return [await child.result() for child in (inherited, chosen, own)]


def test_a_backlog_is_worked_highest_priority_first(app: durably.App) -> None:
    ran: list[str] = []
    journal_app(app, ran)
    for n in range(30):
        app.start("job", f"bulk-{n}")
    for n in range(3):
        app.start("job", f"vip-{n}", priority=10)
    app.start("urgent_job", "urgent")  # the workflow's default: 7

    app.run_until_idle(concurrency=1)

    assert ran[:4] == ["vip-0", "vip-1", "vip-2", "urgent"]
    assert ran[4:] == [f"bulk-{n}" for n in range(30)]  # the rest in the order they came


def test_a_run_that_waited_longer_than_the_head_start_is_not_overtaken(
    app: durably.App, clock: FakeClock
) -> None:
    ran: list[str] = []
    journal_app(app, ran)
    app.start("job", "patient")
    clock.advance("10m")
    app.start("job", "five-minute-head-start", priority=5)
    app.start("job", "twenty-minute-head-start", priority=20)

    app.run_until_idle(concurrency=1)

    assert ran == ["twenty-minute-head-start", "patient", "five-minute-head-start"]


def test_children_inherit_the_parents_priority_unless_their_start_or_workflow_says(
    app: durably.App,
) -> None:
    ran: list[str] = []
    journal_app(app, ran)
    handle = app.start("parent", "p", priority=40)
    app.run_until_idle()

    assert handle.result(timeout=0) == ["p/inherits", "p/chosen", "p/own"]
    children = {
        run.id.rsplit(".", 2)[1]: run.priority for run in app.client.runs().runs if run.parent
    }
    assert children == {"0": 40, "1": 2, "2": 7}  # by their start's position
    assert app.client.get(handle.id).priority == 40


def test_a_restart_keeps_the_priority_and_a_second_start_keeps_the_first(
    app: durably.App,
) -> None:
    ran: list[str] = []
    journal_app(app, ran)
    first = app.start("job", "once", id="once", priority=12)
    again = app.start("job", "once", id="once", priority=0)  # finds the run: nothing changes
    app.run_until_idle()
    restarted = app.handle(app.client.restart(first.id, from_step=0, id="once-again").id)

    assert again.id == first.id
    assert app.client.get("once").priority == 12
    assert app.client.get(restarted.id).priority == 12


@pytest.mark.parametrize("bad", [-1, MAX_PRIORITY + 1, True, 2.5, "5"])
def test_a_priority_that_is_no_level_is_refused_and_nothing_is_started(
    app: durably.App, bad: object
) -> None:
    journal_app(app, [])
    with pytest.raises(DurablyError, match=f"priority must be .*{MAX_PRIORITY}"):
        app.start("job", "x", id="x", priority=bad)  # type: ignore[arg-type]
    assert app.client.runs().runs == []
    with pytest.raises(DurablyError, match=r"@app.workflow\(priority=...\) must be"):
        app.workflow(priority=-3)


def test_the_cli_starts_a_run_with_a_priority_and_runs_show_says_it(
    store_url: str, tmp_path: Path
) -> None:
    app_target = "tests.integration.cli_app:app"
    started = durably_cli(
        "start",
        "count",
        "--app",
        app_target,
        "--input",
        '{"n": 1}',
        "--id",
        "c1",
        "--priority",
        "25",
        cwd=tmp_path,
        app_store=store_url,
    )
    too_high = durably_cli(
        "start",
        "count",
        "--app",
        app_target,
        "--input",
        '{"n": 1}',
        "--priority",
        "1001",
        cwd=tmp_path,
        app_store=store_url,
    )
    shown = durably_cli("runs", "show", "c1", "--store", store_url, cwd=tmp_path)

    assert started.returncode == 0, started.stderr
    assert too_high.returncode == 2
    assert "1001 is not in the range 0<=x<=1000" in too_high.stderr
    assert "priority" in shown.stdout
    assert "25 (a 25-minute head start)" in shown.stdout
