"""`durably runs events|stream|follow` and the progress `runs show` draws, run as real
processes on both stores while the test process's worker drives the run: a reader started
while the run waits for a signal prints what comes after, as it comes, and ends with it."""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import Retry

from .test_cli import REPO, durably_cli, refused

_DEADLINE = 30.0  # seconds a line or an exit may take on a loaded machine


def make_app(url: str) -> durably.App:
    app = durably.App(url)

    @app.step
    async def copy(files: int) -> int:
        for n in range(files):
            durably.write_stream("lines", {"file": n})
            durably.progress(n + 1, files, "files copied")
            await asyncio.sleep(0)
        return files

    @app.step(retry=Retry(attempts=1))
    async def explode() -> None:
        raise RuntimeError("the disk is full")

    @app.workflow
    async def importer(files: int) -> int:
        durably.set_event("status", "begun")
        durably.write_stream("lines", {"file": "header"})
        await durably.wait_for_signal("go")
        copied: int = await copy(files)
        if files < 0:
            await explode()
        durably.set_event("status", "done")
        durably.close_stream("lines")
        return copied

    @app.workflow
    async def doomed() -> None:
        durably.progress(1, 2, "halfway")
        await explode()

    return app


@pytest.fixture
def app(store_url: str) -> Iterator[durably.App]:
    opened = make_app(store_url)
    yield opened
    opened.close()


class Reader:
    """A `durably` command run in the background, whose lines are read as they come."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "durably", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reading = threading.Thread(target=self._read, daemon=True)
        self._reading.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str) -> None:
        """Until a line holding `text` was printed (AssertionError after the deadline)."""
        deadline = time.monotonic() + _DEADLINE
        while not any(text in line for line in self.seen):
            try:
                self.seen.append(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} in {self.seen}") from None

    def ended(self) -> tuple[int, list[str], str]:
        """Its exit status, every line it printed, and its stderr."""
        code = self.process.wait(timeout=_DEADLINE)
        self._reading.join(timeout=_DEADLINE)  # to the end of its output
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        errors = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code, self.seen, errors


def waiting(app: durably.App) -> str:
    """An importer run of 3 files, begun and waiting for its signal `go`."""
    handle = app.start("importer", 3)
    app.run_until_idle()
    assert handle.get_event("status", timeout=5) == "begun"
    return handle.id


def test_events_lists_each_key_and_the_progress_as_a_bar(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    run_id = waiting(app)
    app.client.signal(run_id, "go", None)
    app.run_until_idle()
    shown = durably_cli("runs", "events", run_id, "--store", store_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "progress: [####################] 3/3 files copied" in shown.stdout
    assert shown.stdout.splitlines()[3].split()[:2] == ["status", '"done"']
    as_json = durably_cli("runs", "events", run_id, "--store", store_url, "--json", cwd=tmp_path)
    body = json.loads(as_json.stdout)
    assert [(e["key"], e["value"]) for e in body["events"]] == [("status", "done")]
    assert body["progress"]["done"] == 3
    assert body["progress"]["fraction"] == 1.0
    nothing = durably_cli("runs", "events", "nope", "--store", store_url, cwd=tmp_path)
    refused(nothing, 1, "no run has the id 'nope'")


def test_show_draws_the_progress_bar_and_the_events(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    handle = app.start("doomed")
    app.run_until_idle()
    shown = durably_cli("runs", "show", handle.id, "--store", store_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "progress:      [##########----------] 1/2 halfway" in shown.stdout
    as_json = durably_cli("runs", "show", handle.id, "--store", store_url, "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout)["published"]["progress"]["message"] == "halfway"


@pytest.mark.slow
def test_stream_prints_items_as_they_are_written_until_the_stream_ends(
    app: durably.App, store_url: str
) -> None:
    run_id = waiting(app)
    reader = Reader("runs", "stream", run_id, "lines", "--store", store_url, "--json")
    reader.wait_for('"header"')  # written before the wait: read at once
    app.client.signal(run_id, "go", None)
    app.run_until_idle()
    code, lines, errors = reader.ended()
    assert code == 0, errors
    items = [json.loads(line) for line in lines]
    assert [item["offset"] for item in items] == [0, 1, 2, 3]
    assert [item["value"] for item in items] == [
        {"file": "header"},
        *({"file": n} for n in range(3)),
    ]
    assert [item["attempt"] for item in items] == [None, 1, 1, 1]  # workflow code, then a step
    plain = Reader("runs", "stream", run_id, "lines", "--store", store_url, "--from", "2")
    code, lines, errors = plain.ended()
    assert (code, lines) == (0, ['{"file":1}', '{"file":2}']), errors


@pytest.mark.slow
def test_follow_prints_the_run_live_and_exits_with_how_it_ended(
    app: durably.App, store_url: str
) -> None:
    run_id = waiting(app)
    follower = Reader("runs", "follow", run_id, "--stream", "lines", "--store", store_url)
    follower.wait_for("lines[0]")
    app.client.signal(run_id, "go", None)
    app.run_until_idle()
    code, lines, errors = follower.ended()
    assert code == 0, errors
    assert lines[0].startswith("status    pending: waiting for signal 'go'")
    assert 'event     status = "begun"' in lines
    assert "progress  [####################] 3/3 files copied" in lines
    assert [line for line in lines if line.startswith("stream")] == [
        'stream    lines[0] {"file":"header"}',
        *(f'stream    lines[{n + 1}] {{"file":{n}}}' for n in range(3)),
    ]
    # what one round of reading finds together comes in no set order: only the end is last
    assert 'event     status = "done"' in lines
    assert lines[-1] == "completed: result 3"


@pytest.mark.slow
def test_follow_exits_3_for_a_failed_run_and_130_on_ctrl_c(
    app: durably.App, store_url: str
) -> None:
    handle = app.start("importer", -1)
    app.run_until_idle()
    follower = Reader("runs", "follow", handle.id, "--store", store_url, "--json")
    follower.wait_for('"type":"status"')
    app.client.signal(handle.id, "go", None)
    app.run_until_idle()
    assert handle.status() is durably.RunStatus.NEEDS_ATTENTION  # parked: not ended
    app.client.fail(handle.id, reason="the disk stays full", by="test")
    app.run_until_idle()
    code, lines, errors = follower.ended()
    assert code == 3, (lines, errors)
    end = json.loads(lines[-1])
    assert (end["type"], end["status"]) == ("end", "failed")
    assert any(
        json.loads(line)["status"] == "needs_attention"
        for line in lines[:-1]
        if json.loads(line)["type"] == "status"
    )
    other = waiting(app)
    interrupted = Reader("runs", "follow", other, "--store", store_url)
    interrupted.wait_for("status")
    interrupted.process.send_signal(signal.SIGINT)
    code, _, errors = interrupted.ended()
    assert code == 130, errors
    assert "Traceback" not in errors


def test_follow_of_an_unknown_run_is_refused(
    app: durably.App, store_url: str, tmp_path: Path
) -> None:
    assert app.client.runs().runs == []  # the store exists, without the run
    refused(durably_cli("runs", "follow", "nope", "--store", store_url, cwd=tmp_path), 1, "nope")
