"""Streams and events across a worker's SIGKILL, with real worker processes and readers in
processes of their own, on both stores: a stream of 10,000 items written by a step that is
killed part-way and retried on another worker reaches two readers complete, in order and
without a duplicate; the event the workflow set before the kill is recorded once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably.core.history import EventKind
from tests.chaos.outputs_app import STREAM, build
from tests.integration.processes import REPO, kill, start_worker, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

TARGET = "tests.chaos.outputs_app:app"
OPTIONS = ("--concurrency", "4", "--lease", "2s", "--poll", "50ms")
COUNT = 10_000
KILL_AFTER = 2_000  # items in the store when the first worker is killed
WAIT = 120.0


@pytest.fixture
def app(store_url: str) -> Iterator[durably.App]:
    opened = build(durably.App(store_url))
    yield opened
    opened.close()


def _reader(store_url: str, run_id: str, out: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.chaos.outputs_reader", store_url, run_id, STREAM]
    return subprocess.Popen([*command, str(out)], cwd=REPO)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_stream_reaches_two_readers_whole_across_a_sigkill(
    app: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    handle = app.start("numbers", COUNT, id="stream-1")
    outs = [tmp_path / f"reader-{n}.txt" for n in range(2)]
    readers = [_reader(store_url, handle.id, out) for out in outs]
    processes.extend(readers)
    first_log = tmp_path / "w0.log"
    first = start_worker(store_url, first_log, *OPTIONS, "--name", "w0", target=TARGET)
    processes.append(first)

    def written() -> int:
        return len(app.store.read_stream(handle.id, STREAM, limit=COUNT + 1))

    wait_until(f"{KILL_AFTER} items written", lambda: written() >= KILL_AFTER, first_log, WAIT)
    kill(first)
    at_kill = written()
    assert at_kill < COUNT, "the step wrote every item before the kill: nothing was tested"
    second_log = tmp_path / "w1.log"
    processes.append(start_worker(store_url, second_log, *OPTIONS, "--name", "w1", target=TARGET))

    assert handle.result(timeout=WAIT) == COUNT
    deadline = time.monotonic() + WAIT
    for reader, out in zip(readers, outs, strict=True):
        reader.wait(timeout=max(1.0, deadline - time.monotonic()))
        assert reader.returncode == 0, f"a reader failed; it read {len(_lines(out))} lines"
        lines = _lines(out)
        assert lines[-1] == "end"
        values = [json.loads(line) for line in lines[:-1]]
        assert len(values) == COUNT, f"{len(values)} items, {len(set(values))} different"
        assert values == list(range(COUNT))  # complete, in order, no duplicate

    items = app.store.read_stream(handle.id, STREAM, limit=COUNT + 1)
    assert [item.offset for item in items] == list(range(COUNT + 1))
    assert items[-1].is_end
    attempts = [item.attempt for item in items[:-1]]
    cut = attempts.index(2)  # the retried attempt appended where the killed one stopped
    assert attempts == [1] * cut + [2] * (COUNT - cut)
    assert at_kill <= cut
    history = app.client.history(handle.id)
    phases = [e.data for e in history if e.kind is EventKind.EVENT_SET and e.name == "phase"]
    assert phases == ['"writing"', '"done"']  # set before the kill: recorded once
    started = [e for e in history if e.kind is EventKind.STEP_STARTED]
    assert [e.attempt for e in started] == [1, 2]
    assert durably.RunHandle(app.client, handle.id).get_event("phase") == "done"
