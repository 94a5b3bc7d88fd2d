"""`durably runs cancel|retry|pause|resume|restart` with options that choose runs, and
`durably runs bulk list|show|resume`, run as real processes on both stores: what a dry run
and a filter with no match say, the confirmation that a script must skip with --yes, the
refusals of a filter that names nothing and of a RUN_ID given with options, and the job's
progress and skipped runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.bulk import RunFilter

from .cli_app import Order, make_app
from .test_cli import durably_cli, refused

WAITING = "await_approval"  # its runs wait for a signal


@pytest.fixture
def app(store_url: str) -> Iterator[durably.App]:
    opened = make_app(store_url)
    yield opened
    opened.close()


def waiting(app: durably.App, *run_ids: str) -> None:
    for run_id in run_ids:
        app.start(WAITING, run_id, id=run_id)
    app.run_until_idle()


def test_runs_are_cancelled_in_bulk_from_the_command_line(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    waiting(app, "a1", "a2", "a3")
    app.start("count", 1, id="c1")

    done = durably_cli(
        "runs",
        "cancel",
        "--workflow",
        WAITING,
        "--reason",
        "recall",
        "--yes",
        "--by",
        "sam",
        "--store",
        store_url,
        cwd=tmp_path,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "3 run(s) match: a1, a2, a3"
    [job] = app.client.bulk.jobs()
    assert f"{job.id}: 3 of 3 runs done (3 cancelled)" in lines  # a line a batch, in a pipe
    assert f"bulk job {job.id} finished: 3 of 3 runs done (3 cancelled)" in lines
    app.run_until_idle()
    assert [app.client.get(r).status for r in ("a1", "a2", "a3", "c1")] == [
        RunStatus.CANCELLED,
        RunStatus.CANCELLED,
        RunStatus.CANCELLED,
        RunStatus.COMPLETED,
    ]
    entries = [e for e in app.client.audit().entries if e.action == "cancel"]
    assert {(e.by, e.via, e.detail) for e in entries} == {
        ("sam", "cli", json.dumps({"job": job.id, "reason": "recall"}))
    }

    listed = durably_cli("runs", "bulk", "list", "--store", store_url, cwd=tmp_path)
    assert job.id in listed.stdout
    assert f"workflow={WAITING}" in listed.stdout
    shown = durably_cli(
        "runs", "bulk", "show", job.id, "--json", "--store", store_url, cwd=tmp_path
    )
    assert json.loads(shown.stdout)["job"]["acted"] == 3


def test_a_dry_run_says_what_would_be_done_and_does_nothing(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    waiting(app, *(f"a{n}" for n in range(7)))
    app.client.signal("a6", "approved", {"by": "erin"})
    app.run_until_idle()  # a6 completed: a pause would skip it

    dry = durably_cli(
        "runs", "pause", "--workflow", WAITING, "--dry-run", "--store", store_url, cwd=tmp_path
    )

    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        "7 run(s) match: a0, a1, a2, a3, a4 and 2 more",
        "1 of them would be skipped: a pause acts on runs that are pending, running",
        "(a dry run: nothing was changed)",
    ]
    assert app.client.bulk.jobs() == []
    assert app.store.mail([f"a{n}" for n in range(7)]) == {}


def test_a_filter_with_no_match_says_so(app: durably.App, store_url: str, tmp_path: Path) -> None:
    waiting(app, "a1")

    nothing = durably_cli(
        "runs", "cancel", "--workflow", "fulfil", "--yes", "--store", store_url, cwd=tmp_path
    )

    assert (nothing.returncode, nothing.stdout) == (0, "no run matches: nothing to cancel\n")
    assert app.client.bulk.jobs() == []


def test_what_cannot_be_meant_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    """What is refused does not depend on the store: on SQLite alone."""
    app = make_app(sqlite_url)
    try:
        _refusals(app, sqlite_url, tmp_path)
    finally:
        app.close()


def _refusals(app: durably.App, sqlite_url: str, tmp_path: Path) -> None:
    waiting(app, "a1")
    where = ("--store", sqlite_url)

    refused(durably_cli("runs", "cancel", *where, cwd=tmp_path), 2, "needs --all")
    refused(
        durably_cli("runs", "cancel", "a1", "--workflow", WAITING, *where, cwd=tmp_path),
        2,
        "give RUN_ID or options that choose runs, not both (--workflow given with RUN_ID)",
    )
    refused(
        durably_cli("runs", "cancel", "--all", "--status", "pending", *where, cwd=tmp_path),
        2,
        "--all is every run: give it without other filters",
    )
    refused(  # no terminal here: nobody to confirm
        durably_cli("runs", "cancel", "--workflow", WAITING, *where, cwd=tmp_path),
        2,
        "not on a terminal, so nobody can confirm a cancel in bulk: add --yes",
    )
    refused(
        durably_cli(
            "runs", "restart", "--status", "failed", "--from-step", "1", *where, cwd=tmp_path
        ),
        2,
        "--from-step and --id are for one RUN_ID",
    )
    refused(
        durably_cli("runs", "cancel", "--since", "yesterday", *where, cwd=tmp_path),
        2,
        "'yesterday' is neither a duration back from now",
    )
    refused(
        durably_cli("runs", "bulk", "show", "bulk-nope", *where, cwd=tmp_path), 1, "no bulk job"
    )
    assert app.client.bulk.jobs() == []
    assert app.client.get("a1").status is RunStatus.PENDING


def test_parked_runs_are_retried_and_ended_runs_restarted_in_bulk(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    for run_id in ("f1", "f2"):
        app.start("fulfil", Order(run_id, -1), id=run_id)
    app.start("count", 1, id="c1")
    app.run_until_idle()
    where = ("--store", store_url, "--yes")

    retried = durably_cli("runs", "retry", "--status", "needs_attention", *where, cwd=tmp_path)
    restarted = durably_cli("runs", "restart", "--workflow", "count", *where, cwd=tmp_path)

    assert "finished: 2 of 2 runs done (2 retried)" in retried.stdout, retried.stderr
    assert "finished: 1 of 1 runs done (1 restarted)" in restarted.stdout, restarted.stderr
    assert app.client.get("f1").status is RunStatus.PENDING  # handed back to the workers
    assert app.client.get("c1.restart-1").status is RunStatus.PENDING


def test_a_job_is_followed_and_resumed_by_its_id(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    waiting(app, "a1", "a2")
    app.client.signal("a2", "approved", {"by": "erin"})
    app.run_until_idle()
    begun = app.client.bulk.begin("cancel", RunFilter(workflow=WAITING), by="sam")
    assert begun.job is not None  # made, never run: as a CLI that was killed left it
    where = ("--store", store_url)

    shown = durably_cli("runs", "bulk", "show", begun.job.id, *where, cwd=tmp_path)
    assert "state:    running" in shown.stdout
    assert f"(to go on with it: durably runs bulk resume {begun.job.id})" in shown.stdout
    resumed = durably_cli("runs", "bulk", "resume", begun.job.id, *where, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "finished: 2 of 2 runs done (1 cancelled, 1 skipped)" in resumed.stdout
    shown = durably_cli("runs", "bulk", "show", begun.job.id, *where, cwd=tmp_path)
    [why] = [line.split() for line in shown.stdout.splitlines() if line.startswith("a2 ")]
    assert " ".join(why[1:]).startswith("it is completed: a cancel acts on runs that are")
    again = durably_cli("runs", "bulk", "resume", begun.job.id, *where, cwd=tmp_path)
    assert f"bulk job {begun.job.id} is finished" in again.stdout
