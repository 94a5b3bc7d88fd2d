"""A worker process dies (like SIGKILL) at each commit of a run, in turn, just before the
commit is written and just after it is durable, while a timer fires, a signal is delivered, a
person's approval is folded in, a cancel undoes the run, and a run continues as new; then a
worker of the same name recovers it. Each ends exactly as without the crash: the same status
and result, the same steps completed once each, the same undos; a step body runs twice only
where its outcome's commit was the one lost (at least once, with its key). On both stores.

(Children: tests/chaos/test_children.py; schedule ticks: tests/chaos/test_schedules.py.)
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import durably
from durably.core.history import EventKind
from tests.chaos.control_app import journal
from tests.chaos.crash_points_app import NAME, build, drain
from tests.conftest import POSTGRES_URL, require_postgres
from tests.integration.processes import REPO

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

ENDINGS = {EventKind.RUN_COMPLETED, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED}


@dataclass(frozen=True)
class Outcome:
    status: str
    result: object
    keys: frozenset[str]  # the step and undo keys the journal holds


def _approve(app: durably.App) -> None:
    app.client.decide("r", "ship", by="maria", approved=True)


def _cancel(app: durably.App) -> None:
    app.client.cancel("r", by="ops")


def _signal(app: durably.App) -> None:
    app.client.signal("r", "go", "x", by="ops")


# scenario -> (its workflow's arguments, what a person does once it waits, or before it runs)
SCENARIOS: dict[str, tuple[tuple[object, ...], Callable[[durably.App], None] | None, bool]] = {
    "timer": ((), None, False),
    "signal": ((), _signal, False),  # sent before any worker runs: delivered at its claim
    "approval": ((), _approve, True),  # decided once the run waits for it
    "cancel": ((), _cancel, True),  # cancelled while it sleeps
    "renew": ((0,), None, False),
}


class Stores:
    """A fresh store per case: a SQLite file, or a schema of the PostgreSQL server."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind, self.folder, self.schemas = kind, folder, []  # type: list[str]

    def fresh(self) -> str:
        name = uuid.uuid4().hex[:10]
        if self.kind == "sqlite":
            return f"sqlite:///{self.folder / f'{name}.db'}"
        import psycopg

        schema = f"durably_crash_{name}"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
        self.schemas.append(schema)
        return f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"

    def drop(self) -> None:
        if not self.schemas:
            return
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
            for schema in self.schemas:
                db.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    if request.param == "postgres":
        require_postgres()
    made = Stores(request.param, tmp_path)
    yield made
    made.drop()


def prepared(url: str, log: Path, scenario: str) -> None:
    """The run started, and brought to the moment of the scenario (a person acted)."""
    arguments, act, after_wait = SCENARIOS[scenario]
    app = build(durably.App(url), str(log))
    try:
        app.start(scenario, *arguments, id="r")
        if act is not None and after_wait:
            app.run_until_idle(name=NAME)  # it waits for the person (or sleeps an hour)
        if act is not None:
            act(app)
    finally:
        app.close()


def outcome(url: str, log: Path) -> Outcome:
    app = build(durably.App(url), str(log))
    try:
        drain(app)  # a worker of the crashed one's name: it recovers the run at once
        run = app.client.get("r")
        history = app.client.history("r")
        assert sum(e.kind in ENDINGS for e in history) == 1, [str(e.kind) for e in history]
        per_position = Counter(e.position for e in history if e.kind is EventKind.STEP_COMPLETED)
        assert set(per_position.values()) <= {1}, per_position
        result = app.handle("r").result(timeout=0) if run.status == "completed" else None
        keys = frozenset(line.split()[1] for line in journal(log))
        return Outcome(str(run.status), result, keys)
    finally:
        app.close()


def crash(url: str, log: Path, mode: str, k: int) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.chaos.crash_points_app", url, str(log), mode, str(k)],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode in (0, 137), done.stderr.decode()[-3000:]
    return done.returncode


@pytest.mark.timeout(600)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_crash_at_any_commit_ends_as_without_it(
    stores: Stores, tmp_path: Path, scenario: str
) -> None:
    baseline_log = tmp_path / f"{scenario}-baseline.txt"
    url = stores.fresh()
    prepared(url, baseline_log, scenario)
    assert crash(url, baseline_log, "none", 0) == 0
    expected = outcome(url, baseline_log)
    assert expected.status in ("completed", "cancelled"), expected

    crashes = 0
    for mode in ("before", "after"):
        for k in range(40):  # every commit of the run, in turn, until one past its last
            log = tmp_path / f"{scenario}-{mode}-{k}.txt"
            url = stores.fresh()
            prepared(url, log, scenario)
            if crash(url, log, mode, k) == 0:
                assert k > 0, f"the worker never committed anything in {scenario}"
                break
            crashes += 1
            got = outcome(url, log)
            assert got == expected, f"{scenario}, crash {mode} commit #{k}: {got} != {expected}"
            # a body runs twice only where its outcome's commit was the one lost
            counts = Counter(line.split()[1] for line in journal(log))
            assert sum(count - 1 for count in counts.values()) <= 1, (mode, k, counts)
    assert crashes >= 4  # the faults really happened, at several commits
    print(f"{scenario}: {crashes} crashes, each recovered to {expected}")
