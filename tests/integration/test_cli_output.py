"""The read commands' --json (the HTTP API's shapes), `durably breakers`, a bulk retry of
dead letters, and the command line's usage errors, through the real `durably` command on
both stores."""

from __future__ import annotations

import json
from pathlib import Path

import durably
from durably import RunStatus

from .test_cli import app, durably_cli, elsewhere, park  # noqa: F401  (fixtures)


def test_read_commands_print_json(app: durably.App, store_url: str, elsewhere: Path) -> None:  # noqa: F811
    parked = park(app, "o1")
    app.start("count", 1, id="c1", correlation_id="req-9")

    def read(*args: str) -> object:
        result = durably_cli(*args, "--store", store_url, "--json", cwd=elsewhere)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    page = read("runs", "list", "--correlation-id", "req-9")
    assert isinstance(page, dict)
    assert [run["id"] for run in page["runs"]] == ["c1"]
    assert page["next_cursor"] is None
    shown = read("runs", "show", parked)
    assert isinstance(shown, dict)
    assert shown["run"]["status"] == "needs_attention"
    assert shown["run"]["now"].startswith("parked for a person after 1 attempt(s)")
    assert shown["history"][0]["kind"] == "run_started"
    [letter] = read("dlq", "list")  # type: ignore[misc]
    assert letter["error"]["error_class"] == "ConnectionError"
    assert letter["run_error"]["error_class"] == "durably.errors.StepFailed"
    assert read("approvals", "list") == []
    assert read("workers") == []
    assert read("breakers") == []
    assert read("schedules", "list") == []


def test_dlq_retry_many_at_once(app: durably.App, store_url: str, elsewhere: Path) -> None:  # noqa: F811
    first, second = park(app, "o1"), park(app, "o2")
    app.start("count", 1, id="c1")

    both = durably_cli("dlq", "retry", "--all", "--store", store_url, cwd=elsewhere)
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines()[0] == "2 run(s) pending again"
    assert app.client.get(first).status is RunStatus.PENDING
    assert app.client.get(second).status is RunStatus.PENDING

    mixed = durably_cli("dlq", "retry", first, "c1", "--store", store_url, cwd=elsewhere)
    assert mixed.returncode == 1
    assert mixed.stdout.splitlines()[0] == "0 run(s) pending again"
    assert "error: run " + first in mixed.stderr
    assert "error: run c1" in mixed.stderr

    neither = durably_cli("dlq", "retry", "--store", store_url, cwd=elsewhere)
    assert neither.returncode == 2
    assert "give RUN_ID... or --all" in neither.stderr


def test_usage_errors_exit_2_and_a_bare_group_prints_its_help(elsewhere: Path) -> None:  # noqa: F811
    bare = durably_cli("runs", cwd=elsewhere)
    assert bare.returncode == 2
    assert "Commands:" in bare.stderr
    assert "list" in bare.stderr
    lease = durably_cli("worker", "x:app", "--lease", "1x", cwd=elsewhere)
    assert lease.returncode == 2
    assert "'1x' is not a duration like 30s" in lease.stderr
    assert "Traceback" not in lease.stderr
    # -v after the command is taken as before it (the target is what is wrong here)
    verbose = durably_cli("worker", "nosuch_module:app", "-v", cwd=elsewhere)
    assert verbose.returncode == 2
    assert "cannot import 'nosuch_module'" in verbose.stderr
    assert "No such option" not in verbose.stderr


def test_tables_stay_aligned_with_long_ids_and_cut_them_with_an_ellipsis(
    app: durably.App,  # noqa: F811
    store_url: str,
    elsewhere: Path,  # noqa: F811
) -> None:
    long_id = "order-" + "7" * 60
    app.start("count", 1, id=long_id)
    app.start("count", 2, id="c2")

    shown = durably_cli("runs", "list", "--store", store_url, cwd=elsewhere)

    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    column = header.index("WORKFLOW")
    assert all(row[column:].startswith("count") for row in rows)  # every row under it
    [cut] = [row for row in rows if row.startswith("order-")]
    assert long_id not in cut
    assert cut.split()[0].endswith("…")
    assert len(cut.split()[0]) == 40
    assert "\x1b[" not in shown.stdout  # no colour codes in a pipe
