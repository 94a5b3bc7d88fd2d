"""Debounced and delayed starts through App, its client and the CLI, on a fake clock: the
starts of a key make one run that runs once, with the last input; what a gathering run shows;
the options refused with what to do; a start after the run began makes another; a delayed
start waits as a pending run and runs at its time."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

import durably
from durably import RunStatus, Start
from durably.client.client import Client
from durably.core.audit import Via
from durably.testing import FakeClock
from durably.views.timeline import describe_run

from .test_cli import APP, durably_cli, refused


@pytest.fixture
def seen() -> list[int]:
    return []


@pytest.fixture
def reindex(app: durably.App, seen: list[int]) -> durably.Workflow:
    @app.workflow
    async def reindex(n: int) -> int:
        seen.append(n)
        return n

    return reindex


def test_starts_of_a_key_run_once_after_the_window_with_the_last_input(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow, seen: list[int]
) -> None:
    handles = []
    for n in range(10):
        handles.append(app.start(reindex, n, debounce="30s", debounce_key="doc-7"))
        clock.advance("5s")

    assert len({handle.id for handle in handles}) == 1
    assert app.run_until_idle() == 0  # 5 s since the last start: the window is still open
    clock.advance("25s")
    assert app.run_until_idle() == 1
    assert seen == [9]
    assert handles[0].result(timeout=0) == 9
    assert app.client.get(handles[0].id).gathered == 10


def test_started_says_which_start_made_the_run(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow
) -> None:
    first = app.client.start(reindex, [1], debounce="1m", debounce_key="k")
    second = app.client.start(reindex, [2], debounce="1m", debounce_key="k")

    assert (first.created, second.created) == (True, False)
    assert second.run.id == first.run.id
    assert (second.run.input, second.run.gathered) == ('{"args":[2],"kwargs":{}}', 2)


def test_a_start_after_the_run_began_makes_a_new_run(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow, seen: list[int]
) -> None:
    first = app.start(reindex, 1, debounce="10s", debounce_key="k")
    clock.advance("10s")
    app.run_until_idle()
    second = app.start(reindex, 2, debounce="10s", debounce_key="k")

    assert second.id != first.id
    assert app.client.get(second.id).status is RunStatus.PENDING
    clock.advance("10s")
    app.run_until_idle()
    assert seen == [1, 2]


def test_max_wait_runs_a_steady_stream(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow, seen: list[int]
) -> None:
    for n in range(100):  # a start every 5 s: never 30 s of quiet
        app.start(reindex, n, debounce="30s", debounce_key="k", max_wait="2m")
        app.run_until_idle()
        clock.advance("5s")

    # A run every 2 minutes, with the input of the start at its cap (a start every 5 s: the
    # 25th of each run's, 120 s after its first)
    assert seen == [24, 49, 74, 99]
    clock.advance("1h")
    assert app.run_until_idle() == 0


def test_every_way_to_start_debounces(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow, seen: list[int]
) -> None:
    async def from_a_loop() -> None:
        await app.start_async(reindex, 3, debounce="30s", debounce_key="k")
        await app.client.start_async(reindex, [4], debounce="30s", debounce_key="k")

    app.start(reindex, 1, debounce="30s", debounce_key="k")
    app.client.start_json("reindex", "[2]", debounce="30s", debounce_key="k")
    asyncio.run(from_a_loop())
    app.start_many([Start(reindex, [5], debounce="30s", debounce_key="k")])
    app.client.start_many([Start(reindex, [6], debounce="30s", debounce_key="k")] * 2)

    [run] = app.client.runs().runs
    assert run.gathered == 7
    clock.advance("30s")
    app.run_until_idle()
    assert seen == [6]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce": "30s"}, "debounce= needs a debounce_key="),
        ({"debounce_key": "k"}, "debounce_key= is given without debounce="),
        ({"max_wait": "5m"}, "max_wait= is given without debounce="),
        ({"debounce": "0s", "debounce_key": "k"}, "debounce must be longer than 0"),
        ({"debounce": "soon", "debounce_key": "k"}, "cannot read 'soon' as a duration"),
        ({"debounce": "1s", "debounce_key": "k", "max_wait": 0}, "max_wait must be longer"),
        ({"debounce": "1s", "debounce_key": "k", "id": "r1"}, "cannot name its run's id ('r1')"),
        ({"debounce": "1s", "debounce_key": "k", "delay": "1h"}, "debounce= or delay=/start_at="),
        ({"debounce": "1s", "debounce_key": ""}, "a debounce key must be a non-empty string"),
    ],
)
def test_options_that_do_not_go_together_are_refused_and_nothing_starts(
    app: durably.App, reindex: durably.Workflow, options: dict[str, object], message: str
) -> None:
    with pytest.raises(durably.DurablyError) as refusal:
        app.start(reindex, 1, **options)  # type: ignore[arg-type]

    assert message in str(refusal.value)
    assert app.client.runs().runs == []


def test_a_gathering_run_shows_its_key_its_starts_and_when_it_runs(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow
) -> None:
    began = clock.now()
    for n in range(3):
        handle = app.start(reindex, n, debounce="30s", debounce_key="doc-7", max_wait="5m")
        clock.advance("10s")
    run = app.client.get(handle.id)
    shown = dict(describe_run(run, app.client.history(run.id), [], clock.now()))

    assert shown["now"].startswith(
        "debouncing on 'doc-7': 3 start(s) so far, runs at 2026-01-01 00:00:50 "
        "(2026-01-01 00:05:00 at the latest); each start with this key meanwhile"
    )
    assert shown["status"] == "pending"
    assert shown["due"] == (began + timedelta(seconds=50)).isoformat(timespec="milliseconds")
    assert shown["debounce"] == (
        "gathering the starts of key 'doc-7': 3 start(s) so far, due by "
        "2026-01-01T00:05:00.000+00:00 at the latest"
    )
    clock.advance("30s")
    app.run_until_idle()
    ran = dict(describe_run(app.client.get(run.id), [], [], clock.now()))
    assert ran["debounce"] == "key 'doc-7': 3 start(s) gathered before a worker began it"


def test_a_persons_start_that_joins_is_in_the_audit_trail(
    app: durably.App, reindex: durably.Workflow
) -> None:
    person = Client(app.store, registry=app, clock=app.clock, via=Via.CLI)
    person.start(reindex, [1], debounce="30s", debounce_key="k", by="alice")
    joined = person.start(reindex, [2], debounce="30s", debounce_key="k", by="bob")
    app.start(reindex, 3, debounce="30s", debounce_key="k")  # the app's own: not a person's

    trail = app.client.audit(run_id=joined.run.id).entries
    assert [(entry.by, entry.action) for entry in trail] == [("bob", "start"), ("alice", "start")]
    assert json.loads(trail[0].detail or "") == {"debounce": "k"}


def test_durably_start_debounces_from_the_command_line(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    def start(n: int, *more: str) -> str:
        given = ["--debounce", "30s", "--debounce-key", "k", "--max-wait", "5m", *more]
        result = durably_cli(
            "start",
            "count",
            "--app",
            APP,
            "--input",
            f"[{n}]",
            *given,
            cwd=tmp_path,
            app_store=store_url,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    first, second = start(1), start(2)

    assert first.startswith("created run ")
    assert second.startswith("joined run " + first.split()[2])
    assert "it gathers the starts of key 'k' (2 so far) and is due at " in second
    [run] = app.client.runs().runs
    assert (json.loads(run.input), run.gathered) == ({"args": [2], "kwargs": {}}, 2)
    audit = app.client.audit(run_id=run.id).entries
    assert [entry.via for entry in audit] == ["cli", "cli"]
    alone = ["start", "count", "--app", APP, "--input", "[3]", "--debounce", "30s"]
    refused(durably_cli(*alone, cwd=tmp_path, app_store=store_url), 2, "--debounce-key")
    assert app.client.get(run.id).gathered == 2


# -- delayed starts ----------------------------------------------------------------------


def test_a_delayed_start_waits_as_a_pending_run_and_runs_at_its_time(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow, seen: list[int]
) -> None:
    later = app.start(reindex, 1, delay="24h")
    at = app.start(reindex, 2, start_at=clock.now() + timedelta(hours=2))

    run = app.client.get(later.id)
    assert (run.status, run.available_at) == (RunStatus.PENDING, clock.now() + timedelta(hours=24))
    shown = dict(describe_run(run, app.client.history(run.id), [], clock.now()))
    assert shown["now"] == "waiting until 2026-01-02 00:00:00; then a worker claims it"
    assert app.run_until_idle() == 0
    clock.advance("2h")
    assert app.run_until_idle() == 1
    assert at.result(timeout=0) == 2
    clock.advance("22h")
    assert app.run_until_idle() == 1
    assert seen == [2, 1]


def test_delay_and_start_at_together_are_refused(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow
) -> None:
    with pytest.raises(durably.ConfigError, match="delay= or start_at=, not both"):
        app.start(reindex, 1, delay="1h", start_at=clock.now())
    with pytest.raises(durably.ConfigError, match="timezone-aware"):
        app.start(reindex, 1, start_at=clock.now().replace(tzinfo=None))
    assert app.client.runs().runs == []


def test_a_delayed_start_is_idempotent_on_its_id_and_keeps_its_first_due_time(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow
) -> None:
    first = app.client.start(reindex, [1], id="remind-1", delay="24h")
    clock.advance("1h")
    again = app.client.start(reindex, [1], id="remind-1", delay="1h")

    assert (first.created, again.created, again.run.id) == (True, False, "remind-1")
    assert again.run.available_at == first.run.available_at  # the first start's


def test_a_delayed_run_cancelled_ends_without_running(
    app: durably.App, clock: FakeClock, reindex: durably.Workflow, seen: list[int]
) -> None:
    handle = app.start(reindex, 1, delay="24h")
    app.client.cancel(handle.id, by="alice")

    assert app.run_until_idle() == 1
    assert app.client.get(handle.id).status is RunStatus.CANCELLED
    assert seen == []
