"""What a query costs (durably.query): a run of N completed steps waiting for a signal is
asked a query again and again from this process; each answer replays the run's history in a
throwaway SQLite store, so its cost grows with the history. The read of the run and its
history from the benchmarked store is part of each figure."""

import statistics
import time

import durably
from benchmarks.plan import Metric, Trial, Values

ASKED = 10  # answers timed at each length


def latency(trial: Trial, lengths: tuple[int, ...]) -> Values:
    """The median ms of one query's answer, for a run of each of `lengths` completed steps."""
    values: Values = {}
    for steps in lengths:
        with trial.fresh() as url:
            app = _app(url)
            handle = app.start("counted", steps)
            app.run_until_idle()
            assert handle.query("done") == steps  # warm: imports, the first typed value
            took = []
            for _ in range(ASKED):
                began = time.perf_counter()
                handle.query("done")
                took.append(1000 * (time.perf_counter() - began))
            app.close()
        label = f"query of a run of {steps:,} completed steps"
        values[Metric(f"query_{steps}_steps_ms", label, "ms")] = statistics.median(took)
    return values


def _app(url: str) -> durably.App:
    app = durably.App(url)

    @app.step
    async def count(n: int) -> int:
        return n

    @app.workflow(name="counted", version="1")
    async def counted(steps: int) -> int:
        done: list[int] = []

        @durably.query("done")
        def done_so_far() -> int:
            return len(done)

        for n in range(steps):
            done.append(await count(n))
        await durably.wait_for_signal("go")
        return len(done)

    return app
