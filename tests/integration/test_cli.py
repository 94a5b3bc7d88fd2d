"""The `durably` command, run as a real process: which store it finds (--store, --app,
$DURABLY_STORE, ./durably.db), that reading never creates one, `durably start`, a person's
actions through the client, and one-line errors with their exit codes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.testing import FakeClock

from .cli_app import Order, make_app

REPO = Path(__file__).resolve().parents[2]
APP = "tests.integration.cli_app:app"


def durably_cli(
    *args: str, cwd: Path, app_store: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`durably ARGS` in `cwd`, able to import the tests' app (whose store is `app_store`)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("DURABLY_STORE", "CLI_APP_STORE")}
    clean["PYTHONPATH"] = str(REPO)
    if app_store is not None:
        clean["CLI_APP_STORE"] = app_store
    return subprocess.run(
        [sys.executable, "-m", "durably", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    """The command failed with `code`, and said why on one line starting `error: `."""
    assert result.returncode == code, (result.stdout, result.stderr)
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert message in error, error
    assert "Traceback" not in result.stderr


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A directory that is neither the repository nor the store's."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


@pytest.fixture
def app(store_url: str) -> Iterator[durably.App]:
    opened = make_app(store_url)
    yield opened
    opened.close()


def park(app: durably.App, run_id: str) -> str:
    app.start("fulfil", Order(run_id, -1), id=run_id)
    app.run_until_idle()
    assert app.client.get(run_id).status is RunStatus.NEEDS_ATTENTION
    return run_id


# -- finding the store ------------------------------------------------------------------------


def test_commands_run_from_another_directory_use_the_apps_store(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    app.start("count", 1, id="c1")
    park(app, "o1")

    listed = durably_cli("runs", "list", "--app", APP, cwd=elsewhere, app_store=store_url)
    shown = durably_cli("runs", "show", "c1", "--app", APP, cwd=elsewhere, app_store=store_url)
    letters = durably_cli("dlq", "list", "--app", APP, cwd=elsewhere, app_store=store_url)

    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["o1", "c1"]
    assert shown.returncode == 0, shown.stderr
    assert "workflow:      count" in shown.stdout
    assert letters.returncode == 0, letters.stderr
    assert letters.stdout.splitlines()[1].split()[:3] == ["o1", "needs_attention", "charge"]
    assert list(elsewhere.iterdir()) == []  # no durably.db was made here


def test_store_comes_before_the_apps_and_the_apps_before_the_environment(
    app: durably.App, store_url: str, tmp_path: Path, elsewhere: Path
) -> None:
    app.start("count", 1, id="in-the-apps")
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    other = make_app(other_url)
    other.start("count", 2, id="in-the-other")
    other.close()
    from_env = {"DURABLY_STORE": other_url}

    def listed(*options: str, env: dict[str, str] | None = None) -> list[str]:
        result = durably_cli("runs", "list", *options, cwd=elsewhere, app_store=store_url, env=env)
        assert result.returncode == 0, result.stderr
        return [line.split()[0] for line in result.stdout.splitlines()[1:]]

    assert listed("--app", APP, "--store", other_url) == ["in-the-other"]
    assert listed("--app", APP, env=from_env) == ["in-the-apps"]
    assert listed(env=from_env) == ["in-the-other"]


def test_the_worker_serves_the_store_given_instead_of_the_apps(
    tmp_path: Path, elsewhere: Path
) -> None:
    apps_url = f"sqlite:///{tmp_path / 'apps.db'}"
    given_url = f"sqlite:///{tmp_path / 'given.db'}"
    given = make_app(given_url)
    handle = given.start("count", 41, id="c1")
    env = {k: v for k, v in os.environ.items() if k != "DURABLY_STORE"}
    command = [sys.executable, "-m", "durably", "worker", APP, "--store", given_url]
    worker = subprocess.Popen(
        command,
        cwd=elsewhere,
        env={**env, "PYTHONPATH": str(REPO), "CLI_APP_STORE": apps_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert handle.result(timeout=30) == 42
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
        given.close()
    assert worker.returncode == 0, stderr
    assert not (tmp_path / "apps.db").exists()


# -- reading never creates a store ------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "list"),
        ("runs", "show", "r1"),
        ("dlq", "list"),
        ("dlq", "show", "r1"),
        ("dlq", "retry", "r1"),
        ("dlq", "fail", "r1", "--reason", "no"),
    ],
)
def test_a_store_file_that_does_not_exist_is_an_error_and_is_not_created(
    elsewhere: Path, command: tuple[str, ...]
) -> None:
    result = durably_cli(*command, cwd=elsewhere)

    missing = elsewhere / "durably.db"
    refused(result, 1, f"there is no durably store at {missing} (no such file)")
    assert "sqlite:///relative.db is relative to the current directory" in result.stderr
    assert "pass --app module:attr" in result.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_missing_store_named_by_the_app_or_store_says_where_it_looked(
    tmp_path: Path, elsewhere: Path
) -> None:
    relative = durably_cli("runs", "list", "--store", "sqlite:///shop.db", cwd=elsewhere)
    by_app = durably_cli("dlq", "list", "--app", APP, cwd=elsewhere, app_store="sqlite:///x.db")

    refused(relative, 1, f"there is no durably store at {elsewhere / 'shop.db'}")
    assert "the URL came from --store" in relative.stderr
    refused(by_app, 1, f"there is no durably store at {elsewhere / 'x.db'}")
    assert f"the store of --app {APP}" in by_app.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_file_that_is_not_a_durably_store_is_refused_and_left_alone(elsewhere: Path) -> None:
    path = elsewhere / "theirs.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        db.commit()
    before = path.read_bytes()

    result = durably_cli("runs", "list", "--store", f"sqlite:///{path}", cwd=elsewhere)

    refused(result, 1, f"sqlite:///{path} is not a durably store")
    assert path.read_bytes() == before
    assert sorted(p.name for p in elsewhere.iterdir()) == ["theirs.db"]


# -- starting a run ---------------------------------------------------------------------------


def test_start_makes_a_run_from_json_input_once(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    started = durably_cli(
        "start",
        "fulfil",
        "--app",
        APP,
        "--input",
        '[{"id": "o1", "total": 12}]',
        "--id",
        "o1",
        cwd=elsewhere,
        app_store=store_url,
    )
    again = durably_cli(
        "start",
        "fulfil",
        "--app",
        APP,
        "--input",
        '[{"total": 12, "id": "o1"}]',
        "--id",
        "o1",
        cwd=elsewhere,
        app_store=store_url,
    )
    by_name = durably_cli(
        "start",
        "count",
        "--app",
        APP,
        "--input",
        '{"n": 1, "step": 5}',
        cwd=elsewhere,
        app_store=store_url,
    )

    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("created run o1 (workflow fulfil) in ")
    assert f"durably worker {APP} --store" in started.stdout
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("run o1 exists already, with this workflow and input: pending")
    assert by_name.returncode == 0, by_name.stderr
    app.run_until_idle()
    assert app.handle("o1").result(timeout=0) == "ch-o1"
    [counted] = app.client.runs(workflow="count").runs
    assert app.handle(counted.id).result(timeout=0) == 6


def test_signal_sends_json_to_a_waiting_run_and_refuses_what_cannot_arrive(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    app.start("await_approval", "o7", id="o7")
    app.run_until_idle()
    assert app.client.get("o7").status is RunStatus.PENDING

    bad = durably_cli(
        "signal",
        "o7",
        "approved",
        "--data",
        "{oops",
        "--app",
        APP,
        cwd=elsewhere,
        app_store=store_url,
    )
    unknown = durably_cli(
        "signal", "nobody", "approved", "--app", APP, cwd=elsewhere, app_store=store_url
    )
    sent = durably_cli(
        "signal",
        "o7",
        "approved",
        "--data",
        '{"by": "erin"}',
        "--by",
        "erin",
        "--app",
        APP,
        cwd=elsewhere,
        app_store=store_url,
    )

    refused(bad, 1, "the signal's --data is not JSON")
    refused(unknown, 1, "no run has the id 'nobody'")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("signal 'approved' sent to run o7 (message ")
    app.run_until_idle()
    assert app.handle("o7").result(timeout=0) == "o7: erin"
    finished = durably_cli(
        "signal", "o7", "approved", "--app", APP, cwd=elsewhere, app_store=store_url
    )
    refused(finished, 1, "has finished (completed), so the signal 'approved' cannot reach it")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ('[{"id": "o1", "total": "12"}]', "at input.order.total, input should be a valid integer"),
        ("[1, 2]", "does not fit its parameters"),
        ("{oops", "is not JSON"),
    ],
)
def test_start_refuses_input_that_does_not_fit_with_the_payload_error(
    app: durably.App, store_url: str, elsewhere: Path, given: str, message: str
) -> None:
    result = durably_cli(
        "start", "fulfil", "--app", APP, "--input", given, cwd=elsewhere, app_store=store_url
    )

    refused(result, 1, message)
    assert "error: the input of workflow 'fulfil' " in result.stderr
    assert app.client.runs().runs == []


def test_start_of_another_input_under_a_taken_id_is_a_conflict(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    app.start("count", 1, id="c1")

    result = durably_cli(
        "start",
        "count",
        "--app",
        APP,
        "--input",
        "[2]",
        "--id",
        "c1",
        cwd=elsewhere,
        app_store=store_url,
    )

    refused(result, 1, "a run with id 'c1' already exists with a different input")


# -- a person's actions -----------------------------------------------------------------------


def test_dlq_skip_checks_the_result_against_the_steps_type_only_with_the_app(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    checked, unchecked = park(app, "o1"), park(app, "o2")

    wrong = durably_cli(
        "dlq", "skip", checked, "--result", "12", "--app", APP, cwd=elsewhere, app_store=store_url
    )
    right = durably_cli(
        "dlq",
        "skip",
        checked,
        "--result",
        '"ch-by-hand"',
        "--app",
        APP,
        cwd=elsewhere,
        app_store=store_url,
    )
    as_given = durably_cli(
        "dlq", "skip", unchecked, "--result", "12", "--store", store_url, cwd=elsewhere
    )

    refused(wrong, 1, "the result given for the skipped step does not fit the type hint `str`")
    assert right.returncode == 0, right.stderr
    assert right.stdout.splitlines()[0] == f"run {checked} goes on with that result"
    # the command as it runs here, by its path: pasted into a new shell, it works
    hint = right.stdout.splitlines()[1]
    assert hint.startswith("no worker is live; one must run for it to move on: ")
    command = shlex.split(hint.split(": ", 1)[1])
    assert command[0] == str(Path(sys.executable).parent / "durably")
    assert command[1:3] == ["worker", APP]
    assert as_given.returncode == 0, as_given.stderr
    assert "not checked against the step's type: no --app" in as_given.stdout
    assert "durably worker MODULE:ATTR --store" in as_given.stdout
    app.run_until_idle()
    assert app.handle(checked).result(timeout=0) == "ch-by-hand"
    [skipped] = [e for e in app.client.history(unchecked) if e.kind is EventKind.STEP_SKIPPED]
    assert json.loads(skipped.data or "null") == 12


def test_dlq_retry_acts_on_the_store_alone_and_says_a_worker_must_run(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    run_id = park(app, "o1")

    result = durably_cli(
        "dlq", "retry", run_id, "--store", store_url, "--by", "erin", cwd=elsewhere
    )

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {run_id} is pending again"
    assert lines[1].startswith("no worker is live; one must run for it to move on: ")
    assert app.client.get(run_id).status is RunStatus.PENDING


# -- errors and exit codes --------------------------------------------------------------------


def test_errors_are_one_line_with_exit_1_when_refused_and_2_for_usage(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    app.start("count", 1, id="c1")
    app.run_until_idle()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return durably_cli(*args, cwd=elsewhere, app_store=store_url)

    refused(run("runs", "show", "ghost", "--app", APP), 1, "no run has the id 'ghost' in ")
    refused(run("dlq", "retry", "c1", "--app", APP), 1, "cannot retry run 'c1': it is completed")
    refused(run("runs", "list", "--app", APP, "--cursor", "zzz"), 1, "the cursor 'zzz' is not")
    refused(run("start", "nope", "--app", APP), 1, "no workflow named 'nope'")
    refused(run("runs", "list", "--bogus"), 2, "No such option '--bogus'")
    refused(run("start", "count"), 2, "Missing option '--app'")
    refused(run("runs", "list", "--app", "nowhere:app"), 2, "cannot import 'nowhere'")
    refused(run("runs", "list", "--app", APP, "--limit", "0"), 2, "--limit")
    refused(run("runs", "list", "--app", APP, "--status", "done"), 2, "--status")


def test_runs_list_pages_with_the_cursor_it_prints(
    store_url: str, clock: FakeClock, elsewhere: Path
) -> None:
    app = make_app(store_url, clock=clock)
    for n in range(5):
        app.start("count", n, id=f"c{n}")
        clock.advance("1s")  # a distinct updated_at for each run, for a known order
    app.close()

    def page(*options: str) -> tuple[list[str], str | None]:
        result = durably_cli(
            "runs", "list", "--limit", "3", *options, cwd=elsewhere, app_store=store_url
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()[1:]
        more = [line for line in lines if line.startswith("(more")]
        cursor = more[0].split("--cursor ")[1].rstrip(")") if more else None
        return [line.split()[0] for line in lines if not line.startswith("(more")], cursor

    first, cursor = page("--app", APP)
    assert cursor is not None
    second, last = page("--app", APP, "--cursor", cursor)

    assert (first, second, last) == (["c4", "c3", "c2"], ["c1", "c0"], None)


def test_approvals_are_listed_and_decided_from_the_command_line(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    app.start("await_refund", "o8", id="o8")
    app.start("await_refund", "o9", id="o9")
    app.run_until_idle()

    listed = durably_cli("approvals", "list", "--app", APP, cwd=elsewhere, app_store=store_url)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert [row.split()[:2] for row in rows] == [["o8", "refund"], ["o9", "refund"]]
    assert '{"order":"o8"}' in rows[0]
    assert "reject" in rows[0]

    approved = durably_cli(
        "approve",
        "o8",
        "refund",
        "--by",
        "maria",
        "--comment",
        "ok",
        "--app",
        APP,
        cwd=elsewhere,
        app_store=store_url,
    )
    rejected = durably_cli(
        "reject", "o9", "refund", "--by", "sam", "--app", APP, cwd=elsewhere, app_store=store_url
    )
    again = durably_cli("reject", "o8", "refund", "--app", APP, cwd=elsewhere, app_store=store_url)
    neither = durably_cli("approve", "o8", "--app", APP, cwd=elsewhere, app_store=store_url)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith("approved by maria; run o8 goes on")
    assert rejected.returncode == 0, rejected.stderr
    refused(again, 1, "was already decided: approved by maria")
    refused(neither, 2, "give RUN and NAME, or --token")
    app.run_until_idle()
    assert app.handle("o8").result(timeout=0) == "o8: approved by maria (ok)"
    assert app.handle("o9").result(timeout=0) == "o9: rejected by sam (None)"
    empty = durably_cli("approvals", "list", "--app", APP, cwd=elsewhere, app_store=store_url)
    assert "(no approvals waiting)" in empty.stdout


def test_a_run_is_paused_resumed_cancelled_and_restarted_from_the_command_line(
    app: durably.App, store_url: str, elsewhere: Path
) -> None:
    app.start("await_approval", "o-9", id="s-1")
    app.run_until_idle()  # it waits for its signal

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return durably_cli(*args, "--app", APP, cwd=elsewhere, app_store=store_url)

    paused = cli("pause", "s-1", "--reason", "audit", "--by", "ops")
    assert paused.returncode == 0, paused.stderr
    assert "run s-1 (pending): pause sent" in paused.stdout
    app.run_until_idle()
    assert app.client.get("s-1").status is RunStatus.PAUSED
    assert "s-1" in cli("runs", "list", "--status", "paused").stdout
    assert "paused:        by ops at " in cli("runs", "show", "s-1").stdout
    again = cli("pause", "s-1")
    assert again.returncode == 0
    assert "nothing to pause: it is paused already" in again.stdout

    resumed = cli("resume", "s-1", "--by", "ops")
    assert "resume sent; it goes on from where it stopped" in resumed.stdout
    app.run_until_idle()
    assert app.client.get("s-1").status is RunStatus.PENDING  # waiting for its signal again

    cancelled = cli("cancel", "s-1", "--reason", "duplicate order", "--by", "ops")
    assert "cancel sent" in cancelled.stdout
    app.run_until_idle()
    run = app.client.get("s-1")
    assert run.status is RunStatus.CANCELLED
    assert run.error is not None
    assert run.error.message == "cancelled by ops: duplicate order"
    assert "it is cancelled already" in cli("cancel", "s-1").stdout
    refused(cli("pause", "s-1"), 1, "it has finished (cancelled)")
    refused(cli("cancel", "nobody"), 1, "no run has the id 'nobody'")

    restarted = cli("runs", "restart", "s-1", "--from-step", "0", "--by", "ops")
    assert restarted.returncode == 0, restarted.stderr
    assert "restarted run s-1 as s-1.restart-1 from step #0" in restarted.stdout
    assert app.client.get("s-1.restart-1").status is RunStatus.PENDING
    refused(cli("runs", "restart", "s-1.restart-1", "--from-step", "0"), 1, "only an ended run")
