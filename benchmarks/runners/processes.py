"""Engines in processes of their own: `ProcessRunner` runs an engine's runner module in a
fresh process per measurement (engines never share an interpreter: DBOS is a process-wide
singleton); a `Child` is a process read while it runs: a runner, or a `durably worker` of
durably_runner's app (`durably_worker`; `workers`, and `supervised`, one `durably worker
--processes N`, which stop them at the end).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.runners.protocol import BenchmarkError, Load

if TYPE_CHECKING:
    from benchmarks.plan import Fresh, Trial

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout: `-m benchmarks...` works
LIMIT = 900.0  # seconds any one process may take


class ProcessRunner:
    """An engine's runner module, a process per measurement; `options` go to every command."""

    def __init__(self, name: str, fast: bool, options: Mapping[str, object]) -> None:
        self.name, self.fast, self.options = name, fast, options
        self.module = f"benchmarks.runners.{name}_runner"
        found = importlib.util.find_spec(name) is not None
        self.missing = None if found else "not installed (pip install -e '.[bench]')"

    def describe(self) -> dict[str, Any]:
        version = next((d.version for d in metadata.distributions(name=self.name)), None)
        return {"version": version, "runner": self.module, "missing": self.missing}

    def argv(self, command: str, url: str, options: Mapping[str, object]) -> list[str]:
        options = {"url": url, "fast": self.fast, **options, **self.options}
        return [sys.executable, "-m", self.module, command, json.dumps(options, default=str)]

    def warm_up(self, fresh: Fresh) -> None:
        """One cold start, not recorded: bytecode compiled, files in the page cache."""
        with fresh() as url, Child(self.argv("cold-start", url, {})) as child:
            child.wait()

    def throughput(self, trial: Trial, url: str, load: Load) -> float:
        return float(self.run(trial, "throughput", url, **asdict(load))["total_seconds"])

    def run(self, trial: Trial, command: str, url: str, **options: object) -> dict[str, Any]:
        """Run one command to its end; its JSON line, recorded in the trial."""
        with Child(self.argv(command, url, options)) as child:
            output = child.json_line()
            if (code := child.wait()) != 0:
                raise child.failed(f"exited with {code}")
        trial.record(command, options, output)
        return output


class Child:
    """A process run from the checkout: its stderr in a file, its stdout read or dropped."""

    def __init__(
        self, argv: list[str], *, env: Mapping[str, str] = {}, ready: str = "", stdout: bool = True
    ) -> None:
        self.argv, self.ready = argv, ready
        self.log = tempfile.NamedTemporaryFile("w", prefix="durably-bench-")  # noqa: SIM115
        out, env = subprocess.PIPE if stdout else subprocess.DEVNULL, {**os.environ, **env}
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=self.log, text=True
        )

    def wait_started(self, count: int = 1) -> None:
        """Until it has logged that it started (`count` times: a supervisor's workers); exiting
        first, or not within LIMIT, fails."""
        deadline = time.monotonic() + LIMIT
        while Path(self.log.name).read_text().count(self.ready) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise self.failed(f"exited ({self.process.returncode}) or took {LIMIT:g} s")
            time.sleep(0.005)

    def json_line(self, key: str | None = None, limit: float = LIMIT) -> dict[str, Any]:
        """The first stdout line that is a JSON object (with `key`), within `limit` seconds."""
        assert self.process.stdout is not None
        timer = threading.Timer(limit, self.process.kill)
        timer.start()
        try:
            for line in self.process.stdout:
                with contextlib.suppress(ValueError):
                    if isinstance(found := json.loads(line), dict) and key in (None, *found):
                        return found
        finally:
            timer.cancel()
        why = f"exited with {self.process.wait()} before printing its JSON line ({key})"
        raise self.failed(f"{why}; killed if still running after {limit:g} s")

    def wait(self, limit: float = LIMIT) -> int:
        """Its exit code; killed, and a failure, if it runs past `limit` seconds."""
        try:
            return self.process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            failure = self.failed(f"still running after {limit:g} s")
            self.close()
            raise failure from None

    def failed(self, why: str) -> BenchmarkError:
        stderr = Path(self.log.name).read_text().rstrip()
        return BenchmarkError(f"{' '.join(self.argv)}\n  {why}\n--- its stderr ---\n{stderr}")

    def close(self) -> None:
        """SIGKILL, if it still runs; its pipe and log closed."""
        self.process.kill()  # if it still runs
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def durably_worker(url: str, *options: str, env: Mapping[str, str] = {}) -> Child:
    """`durably worker` of durably_runner's app on the store at `url`."""
    app = "benchmarks.runners.durably_runner:app"
    argv = [sys.executable, "-m", "durably", "worker", app, *options]
    env = {"DURABLY_STORE": url, **env}
    return Child(argv, env=env, ready="started (concurrency", stdout=False)


@contextmanager
def supervised(url: str, count: int, *options: str, env: Mapping[str, str] = {}) -> Iterator[Child]:
    """`durably worker --processes COUNT` (a supervisor of COUNT worker processes; 1: the
    worker alone), once every worker serves; SIGTERM at the end, for it to exit 0."""
    with durably_worker(url, "--processes", str(count), *options, env=env) as supervisor:
        supervisor.wait_started(count)
        yield supervisor
        supervisor.process.send_signal(signal.SIGTERM)
        if (code := supervisor.wait(limit=60)) != 0:
            raise supervisor.failed(f"exited with {code} on SIGTERM")


@contextmanager
def workers(url: str, count: int, *options: str) -> Iterator[list[Child]]:
    """`count` durably workers, once started; SIGTERM at the end, each to exit 0."""
    started = [durably_worker(url, *options) for _ in range(count)]
    try:
        for child in started:
            child.wait_started()
        yield started
        for child in started:
            child.process.send_signal(signal.SIGTERM)
        for child in started:
            if (code := child.wait(limit=30)) != 0:
                raise child.failed(f"exited with {code} on SIGTERM")
    finally:
        for child in started:
            child.close()
