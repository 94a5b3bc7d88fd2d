"""The seed article's arithmetic, measured on the engine.

Eight steps that each fail transiently 1% of the time complete together only
0.99^8 = 92.27% of the time. One retry that recovers 80% of those failures makes a step fail
for good with probability 0.01 * 0.2 = 0.002, and the workflow completes 0.998^8 = 98.41% of
the time.

The failures come from a seeded hash of (run, step, attempt), so the test is deterministic
and the model can say exactly which runs complete and how many attempts each one takes; the
engine must agree with it run by run, and the rates must sit within four binomial standard
deviations of the article's numbers.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass

import pytest

import durably
from durably import Retry, RunStatus
from durably.testing import FakeClock

from .conftest import settle, sql_rows

SEED = 20_240_607
RUNS = 2_000
STEPS = 8
P_FIRST = 0.01  # a first attempt fails
P_AGAIN = 0.2  # a second attempt fails, given the first did (the retry recovers 80%)
SIGMAS = 4


def uniform(run_id: str, position: int, attempt: int) -> float:
    """A reproducible draw in [0, 1) for one attempt of one step of one run."""
    digest = hashlib.blake2b(f"{SEED}:{run_id}:{position}:{attempt}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big") / 2**64


def attempt_fails(run_id: str, position: int, attempt: int) -> bool:
    return uniform(run_id, position, attempt) < (P_FIRST if attempt == 1 else P_AGAIN)


@dataclass(frozen=True)
class Prediction:
    completed: bool
    attempts: int  # step attempts the run makes in all


def predict(run_id: str, attempts_per_step: int) -> Prediction:
    """What the failure model says happens to one run, without any engine."""
    made = 0
    for position in range(STEPS):
        for attempt in range(1, attempts_per_step + 1):
            made += 1
            if not attempt_fails(run_id, position, attempt):
                break
        else:
            return Prediction(False, made)
    return Prediction(True, made)


class Injector:
    """The step bodies' side of the model: fails attempts as the model says, and counts."""

    def __init__(self) -> None:
        self.made: Counter[tuple[str, int]] = Counter()  # (run, position) -> attempts made

    def attempt(self, run_id: str, position: int) -> None:
        self.made[(run_id, position)] += 1
        if attempt_fails(run_id, position, self.made[(run_id, position)]):
            raise ConnectionError(f"injected transient failure of step {position}")

    def per_run(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for (run_id, _), made in self.made.items():
            counts[run_id] += made
        return counts


def eight_steps_app(app: durably.App, injector: Injector) -> durably.Workflow:
    def make(position: int) -> durably.Step:
        @app.step(name=f"step_{position}")
        async def step(value: int) -> int:
            run_id = durably.idempotency_key().split(":", 1)[0]
            injector.attempt(run_id, position)
            return value + 1

        return step

    steps = [make(position) for position in range(STEPS)]

    @app.workflow
    async def pipeline(value: int) -> int:
        for step in steps:
            value = await step(value)
        return value

    return pipeline


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("attempts", "article_rate"),
    [(1, 0.99**STEPS), (2, (1 - P_FIRST * P_AGAIN) ** STEPS)],
    ids=["no-retry", "one-retry"],
)
def test_completion_rate_matches_the_articles_arithmetic(
    store_url: str, clock: FakeClock, attempts: int, article_rate: float
) -> None:
    assert round(article_rate, 4) == (0.9227 if attempts == 1 else 0.9841)
    app = durably.App(
        store_url,
        clock=clock,
        seed=1,
        default_retry=Retry(attempts=attempts, initial="1s", jitter="none"),
    )
    injector = Injector()
    workflow = eight_steps_app(app, injector)
    run_ids = [f"r{n:05d}" for n in range(RUNS)]
    try:
        for run_id in run_ids:
            app.start(workflow, 0, id=run_id)
        settle(app, clock)

        statuses = {run.id: run.status for run in app.client.runs(limit=RUNS + 1).runs}
        step_starts = dict(
            sql_rows(
                store_url,
                "SELECT run_id, count(*) FROM durably_events WHERE kind = ? GROUP BY run_id",
                ["step_started"],
            )
        )
    finally:
        app.close()

    predictions = {run_id: predict(run_id, attempts) for run_id in run_ids}

    # (a)/(b): the rate sits where the article says, within binomial noise
    completed = sum(status is RunStatus.COMPLETED for status in statuses.values())
    rate = completed / RUNS
    sigma = math.sqrt(article_rate * (1 - article_rate) / RUNS)
    print(f"\n{attempts} attempt(s) per step: {rate:.4f} completed, article {article_rate:.4f}")
    assert abs(rate - article_rate) <= SIGMAS * sigma, (rate, article_rate, sigma)

    # the engine did exactly what the model predicts, run by run
    expected = {
        run_id: RunStatus.COMPLETED if p.completed else RunStatus.NEEDS_ATTENTION
        for run_id, p in predictions.items()
    }
    assert statuses == expected

    # (c): the engine's attempts (step_started events) are the attempts the model made
    made = injector.per_run()
    assert {run_id: int(count) for run_id, count in step_starts.items()} == dict(made)
    assert dict(made) == {run_id: p.attempts for run_id, p in predictions.items()}
    if attempts == 2:
        retried = sum(p.attempts > STEPS for p in predictions.values() if p.completed)
        assert retried > 0  # some runs completed only thanks to the retry
