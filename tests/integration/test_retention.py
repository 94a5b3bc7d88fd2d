"""Retention on both stores: the workers of an app with retention= delete the runs that ended
longer ago, a batch at a time, and never a dead letter or a run still waiting; `durably prune`
does the same on demand."""

from __future__ import annotations

from pathlib import Path

import durably
from durably import Retry, RunStatus
from durably.testing import FakeClock

from .test_cli import durably_cli


def test_workers_delete_old_ended_runs_and_keep_dead_letters_and_waiting_runs(
    store_url: str, clock: FakeClock
) -> None:
    app = durably.App(store_url, clock=clock, retention="7d")
    try:

        @app.step(retry=Retry(attempts=1))
        async def work(n: int) -> int:
            if n < 0:
                raise ConnectionError("the service is down")
            return n

        @app.workflow
        async def job(n: int) -> int:
            if n == 0:
                await durably.sleep("30d")
            return await work(n)  # type: ignore[no-any-return]

        for n in (1, 2, 3, -1, 0):
            app.start(job, n, id=f"old-{n}")
        app.run_until_idle()
        assert app.client.get("old--1").status is RunStatus.NEEDS_ATTENTION
        clock.advance("8d")
        app.start(job, 4, id="young")
        app.run_until_idle()

        left = {run.id for run in app.client.runs().runs}
        assert left == {"old--1", "old-0", "young"}  # the dead letter and the sleeper stay
        assert app.client.history("old-0")  # with their histories
    finally:
        app.close()


def test_durably_prune_deletes_what_ended_before_its_age(
    store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    app = durably.App(store_url)  # the system clock, as the command's
    try:

        @app.workflow
        async def quick() -> str:
            return "done"

        for n in range(3):
            app.start(quick, id=f"q-{n}")
        app.run_until_idle()
        kept = durably_cli("prune", "--older-than", "1h", "--store", store_url, cwd=tmp_path)
        gone = durably_cli(
            "prune", "--older-than", "0s", "--batch", "2", "--store", store_url, cwd=tmp_path
        )

        assert kept.returncode == 0, kept.stderr
        assert kept.stdout.startswith("deleted 0 run(s) that ended before ")
        assert gone.returncode == 0, gone.stderr
        assert gone.stdout.startswith("deleted 3 run(s)")
        assert "deleted 2 run(s) so far" in gone.stderr
        assert app.client.runs().runs == []
    finally:
        app.close()
