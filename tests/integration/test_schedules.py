"""Schedules on both stores, on the fake clock: exactly one run per tick, whatever the passes;
cron across daylight saving changes over a simulated week; the catch-up and overlap policies;
pause, resume, trigger and backfill; the tick's time as an argument; bad schedules refused."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import durably
from durably import ConfigError
from durably.testing import FakeClock

from .test_cli import durably_cli


def ticks_run(app: durably.App, name: str) -> list[str]:
    """The ticks (UTC ISO times) the schedule's runs were started for, in order."""
    prefix = f"schedule:{name}:"
    return sorted(
        run.id.removeprefix(prefix)
        for run in app.client.runs(limit=1000).runs
        if run.id.startswith(prefix)
    )


def passes(app: durably.App, clock: FakeClock, *, step: str, count: int) -> None:
    for _ in range(count):
        clock.advance(step)
        app.run_until_idle()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 23, 0, 0, 30, tzinfo=UTC))  # a Monday


def test_every_tick_starts_exactly_one_run(app: durably.App, clock: FakeClock) -> None:
    done: list[str] = []

    @app.schedule(every="15m", tick="at")
    @app.workflow
    async def sweep(at: datetime) -> str:
        done.append(at.isoformat())
        return at.isoformat()

    app.run_until_idle()  # registers: ticks from now on
    for _ in range(8):
        clock.advance("7m30s")
        app.run_until_idle()
        app.run_until_idle()  # a second pass at the same time starts nothing more

    expected = [f"2026-03-23T{t}:00+00:00" for t in ("00:15", "00:30", "00:45", "01:00")]
    assert ticks_run(app, "sweep") == expected
    assert done == expected  # each ran once, with its tick's time
    [info] = app.schedules.all()
    assert (info.name, info.fired, info.skipped, info.paused) == ("sweep", 4, 0, False)


@pytest.mark.parametrize(
    ("start", "changed_day", "local_times"),
    [
        # spring forward: 02:30 does not exist on the 29th; cron runs it at 03:00
        (datetime(2026, 3, 23, tzinfo=UTC), "2026-03-29", ["03:00"]),
        # fall back: 02:30 happens twice on the 25th; cron runs it once
        (datetime(2026, 10, 19, tzinfo=UTC), "2026-10-25", ["02:30"]),
    ],
    ids=["spring-forward", "fall-back"],
)
def test_a_cron_schedule_follows_daylight_saving_over_a_week(
    app: durably.App, start: datetime, changed_day: str, local_times: list[str]
) -> None:
    clock = FakeClock(start)
    week = durably.App(app.store_url, clock=clock)
    try:

        @week.schedule(cron="30 2 * * *", timezone="Europe/Berlin")
        @week.workflow
        async def nightly() -> None: ...

        week.run_until_idle()
        passes(week, clock, step="1h", count=7 * 24)

        berlin = ZoneInfo("Europe/Berlin")
        local = [datetime.fromisoformat(t).astimezone(berlin) for t in ticks_run(week, "nightly")]
        assert len(local) == 7  # one a day, the day of the change too
        assert [t.strftime("%H:%M") for t in local if t.date().isoformat() == changed_day] == (
            local_times
        )
        assert {t.strftime("%H:%M") for t in local if t.date().isoformat() != changed_day} == {
            "02:30"
        }
    finally:
        week.close()


@pytest.mark.parametrize(("catchup", "expected"), [("latest", 1), ("all", 3)])
def test_ticks_missed_while_no_worker_ran_follow_the_catchup_policy(
    app: durably.App, clock: FakeClock, catchup: str, expected: int
) -> None:
    @app.schedule(every="1h", catchup=catchup)
    @app.workflow
    async def hourly() -> None: ...

    app.run_until_idle()
    clock.advance("3h")  # every worker was down for three ticks
    app.run_until_idle()

    assert len(ticks_run(app, "hourly")) == expected
    [info] = app.schedules.all()
    assert info.skipped == 3 - expected


@pytest.mark.parametrize(("overlap", "runs_at_second_tick"), [("skip", 1), ("allow", 2)])
def test_a_tick_while_the_previous_run_goes_on_is_skipped_or_allowed(
    app: durably.App, clock: FakeClock, overlap: str, runs_at_second_tick: int
) -> None:
    @app.schedule(every="1h", overlap=overlap)
    @app.workflow
    async def long_job() -> None:
        await durably.wait_for_signal("done")

    app.run_until_idle()
    passes(app, clock, step="1h", count=2)
    assert len(ticks_run(app, "long_job")) == runs_at_second_tick


def test_a_queued_tick_starts_when_the_previous_run_ends(
    app: durably.App, clock: FakeClock
) -> None:
    @app.schedule(every="1h", overlap="queue")
    @app.workflow
    async def queued() -> None:
        await durably.wait_for_signal("done")

    app.run_until_idle()
    passes(app, clock, step="1h", count=2)
    [first] = ticks_run(app, "queued")
    app.client.signal(f"schedule:queued:{first}", "done")
    passes(app, clock, step="1s", count=2)
    assert len(ticks_run(app, "queued")) == 2  # the held tick, once the first ended


def test_a_queued_tick_outlives_a_pause(app: durably.App, clock: FakeClock) -> None:
    @app.schedule(every="1h", overlap="queue")
    @app.workflow
    async def queued() -> None:
        await durably.wait_for_signal("done")

    app.run_until_idle()
    passes(app, clock, step="1h", count=2)  # the second tick is held for the first run's end
    app.schedules.pause("queued")
    app.schedules.resume("queued")  # it was planned before the pause: it is not dropped
    [first] = ticks_run(app, "queued")
    app.client.signal(f"schedule:queued:{first}", "done")
    passes(app, clock, step="1s", count=2)
    assert len(ticks_run(app, "queued")) == 2


def test_pause_resume_trigger_and_backfill(app: durably.App, clock: FakeClock) -> None:
    @app.schedule(every="1h", tick="hour")
    @app.workflow
    async def report(hour: datetime) -> str:
        return hour.isoformat()

    app.run_until_idle()
    app.schedules.pause("report")
    passes(app, clock, step="1h", count=2)
    assert ticks_run(app, "report") == []
    app.schedules.resume("report")
    passes(app, clock, step="1h", count=1)
    assert len(ticks_run(app, "report")) == 1  # the ticks while paused are not caught up

    triggered = app.schedules.trigger("report")
    day = datetime(2026, 3, 1, tzinfo=UTC)
    filled = app.schedules.backfill("report", day, day + timedelta(hours=23))
    again = app.schedules.backfill("report", day, day + timedelta(hours=23))
    app.run_until_idle()

    assert len(filled) == 24
    assert again == filled  # found, not started twice
    assert app.handle(triggered).result(timeout=0) == clock.now().isoformat()
    assert app.handle(filled[5]).result(timeout=0) == (day + timedelta(hours=5)).isoformat()
    assert len(ticks_run(app, "report")) == 1 + 1 + 24


def test_jitter_delays_each_tick_the_same_for_every_worker(
    app: durably.App, clock: FakeClock
) -> None:
    @app.schedule(every="1h", jitter="30m")
    @app.workflow
    async def spread() -> None: ...

    app.run_until_idle()
    [info] = app.schedules.all()
    assert info.next_fire is not None
    delay = info.next_fire - datetime(2026, 3, 23, 1, tzinfo=UTC)
    assert timedelta(0) <= delay < timedelta(minutes=30)
    clock.set(info.next_fire - timedelta(seconds=1))
    app.run_until_idle()
    assert ticks_run(app, "spread") == []
    clock.advance("1s")
    app.run_until_idle()
    assert len(ticks_run(app, "spread")) == 1


def test_bad_schedules_are_refused_with_what_to_do(app: durably.App) -> None:
    @app.workflow
    async def job() -> None: ...

    cases = [
        ({"cron": "61 * * * *"}, "is not a cron expression"),
        ({"cron": "* * * * *", "every": "1m"}, "one of cron"),
        ({}, "one of cron"),
        ({"every": "1h", "timezone": "Mars/Olympus"}, "is not a time zone"),
        ({"every": "1h", "overlap": "maybe"}, "overlap='maybe'"),
        ({"every": "1h", "catchup": "some"}, "catchup='some'"),
    ]
    for options, message in cases:
        with pytest.raises(ConfigError, match=message):
            app.schedule(**options)(job)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"goes above @app\.workflow"):
        app.schedule(every="1h")(asyncio.sleep)  # type: ignore[arg-type]


def test_the_schedules_commands(store_url: str, tmp_path: Path) -> None:
    target = "tests.integration.schedule_cli_app:app"
    opened = durably.App(store_url)  # the store, as a worker's first start makes it
    opened.store  # noqa: B018
    opened.close()

    def run(*words: str) -> subprocess.CompletedProcess[str]:
        done = durably_cli("schedules", *words, "--app", target, cwd=tmp_path, app_store=store_url)
        assert done.returncode == 0, done.stderr
        return done

    listed = run("list").stdout
    assert "morning_report" in listed
    assert "cron 0 6 * * * (Europe/Berlin)" in listed
    run("pause", "morning_report")
    assert " paused " in run("list").stdout
    triggered = run("trigger", "morning_report").stdout
    filled = run("backfill", "morning_report", "--from", "2026-03-01", "--to", "2026-03-07T23:00")
    run("resume", "morning_report")

    assert triggered.startswith("started run schedule:morning_report:")
    assert filled.stdout.startswith("7 tick(s) of morning_report have their run")
    assert " active " in run("list").stdout


def test_the_latest_of_many_missed_ticks_is_the_one_started(
    app: durably.App, clock: FakeClock
) -> None:
    @app.schedule(every="1m")
    @app.workflow
    async def minutely() -> None: ...

    app.run_until_idle()
    clock.advance("250m")  # 250 ticks missed: more than a pass lists for catchup="all"
    app.run_until_idle()

    assert ticks_run(app, "minutely") == ["2026-03-23T04:10:00+00:00"]
    [info] = app.schedules.all()
    assert (info.fired, info.skipped) == (1, 249)


def test_missed_ticks_caught_up_one_at_a_time_unless_overlap_allows(
    app: durably.App, clock: FakeClock
) -> None:
    @app.schedule(every="1h", catchup="all", overlap="queue")
    @app.workflow
    async def queued() -> None:
        await durably.wait_for_signal("done")

    @app.schedule(every="1h", catchup="all", overlap="skip")
    @app.workflow
    async def skipping() -> None:
        await durably.wait_for_signal("done")

    app.run_until_idle()
    clock.advance("3h")  # three ticks missed
    passes(app, clock, step="1s", count=3)
    assert len(ticks_run(app, "queued")) == 1  # not three at once: overlap says one at a time
    assert len(ticks_run(app, "skipping")) == 1
    for round_ in range(2):  # each end lets the next queued tick start
        [*_, latest] = ticks_run(app, "queued")
        app.client.signal(f"schedule:queued:{latest}", "done")
        passes(app, clock, step="1s", count=3)
        assert len(ticks_run(app, "queued")) == 2 + round_
    info = {i.name: i for i in app.schedules.all()}
    assert (info["queued"].fired, info["queued"].skipped) == (3, 0)
    assert (info["skipping"].fired, info["skipping"].skipped) == (1, 2)


def test_durations_and_a_six_field_cron_are_refused_as_config_errors(
    app: durably.App, store_url: str
) -> None:
    @app.workflow
    async def job() -> None: ...

    with pytest.raises(ConfigError, match="has 6 fields"):
        app.schedule(cron="0 6 * * * *")(job)
    with pytest.raises(ConfigError, match=r"@app.schedule\(every=...\)"):
        app.schedule(every="soon")(job)
    with pytest.raises(ConfigError, match="too short"):
        durably.App(store_url, retention="0s")
    with pytest.raises(ConfigError, match=r"App\(retention=...\)"):
        durably.App(store_url, retention="a while")
