"""The starter: concurrent starts share one batch (leader and followers); a lone start goes
straight to the store's one-run call. The store calls are plain functions here: this is the
hand-off alone (the stores' create_runs has its contract tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest

from durably.client.starts import Created, Starter
from durably.core.status import RunStatus
from durably.stores import NewRun, RunRecord

AT = datetime(2026, 1, 1, tzinfo=UTC)


def record(run: NewRun) -> RunRecord:
    return RunRecord(
        run.id, run.workflow, RunStatus.PENDING, run.input, None, None, AT, AT, AT, None, 0, 1
    )


class Calls:
    """The store's two calls, recording each batch; the first one-run call waits for `go`."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.inside = threading.Event()
        self.go = threading.Event()

    def one(self, run: NewRun) -> Created:
        self.batches.append([run.id])
        self.inside.set()
        assert self.go.wait(10)
        return record(run), True

    def many(self, runs: Sequence[NewRun]) -> list[Created]:
        self.batches.append([run.id for run in runs])
        return [(record(run), True) for run in runs]


def test_a_lone_start_uses_the_one_run_call() -> None:
    calls = Calls()
    calls.go.set()
    starter = Starter(calls.many, calls.one)

    assert starter.create(NewRun("a", "w", "{}"))[0].id == "a"
    assert starter.create(NewRun("b", "w", "{}"))[0].id == "b"
    assert calls.batches == [["a"], ["b"]]


def test_starts_that_come_while_one_commits_share_the_next_commit() -> None:
    calls = Calls()
    starter = Starter(calls.many, calls.one)
    answers: dict[str, str] = {}

    def start(run_id: str) -> None:
        answers[run_id] = starter.create(NewRun(run_id, "w", "{}"))[0].id

    leader = threading.Thread(target=start, args=("lead",))
    leader.start()
    assert calls.inside.wait(10)  # the leader is in its commit
    followers = [threading.Thread(target=start, args=(f"f{n}",)) for n in range(5)]
    for follower in followers:
        follower.start()
    wait_for(lambda: len(starter._queue) == 5)
    calls.go.set()
    for thread in [leader, *followers]:
        thread.join(timeout=10)

    assert calls.batches[0] == ["lead"]
    assert sorted(calls.batches[1]) == [f"f{n}" for n in range(5)]  # one commit for all five
    assert len(calls.batches) == 2
    assert answers == {run_id: run_id for run_id in ["lead", *(f"f{n}" for n in range(5))]}


def test_a_failed_commit_fails_its_start_and_the_next_start_leads_again() -> None:
    failures = [OSError("disk on fire")]

    def one(run: NewRun) -> Created:
        if failures:
            raise failures.pop()
        return record(run), True

    starter = Starter(lambda runs: [one(run) for run in runs], one)

    with pytest.raises(OSError, match="disk on fire"):
        starter.create(NewRun("a", "w", "{}"))
    assert starter.create(NewRun("a", "w", "{}")) == (record(NewRun("a", "w", "{}")), True)


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "never came true"
        time.sleep(0.001)
