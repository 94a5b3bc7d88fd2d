"""Engines in processes of their own: the runner adapter `ProcessRunner` runs an engine's
runner module in a fresh process per measurement (engines never share an interpreter: DBOS is
a process-wide singleton), and `Child` is a process read while it runs (a runner, or a
`durably worker`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.runners.protocol import BenchmarkError, Fresh, Load, Timing

if TYPE_CHECKING:
    from benchmarks.runners.protocol import Recorder

__all__ = ["ROOT", "Child", "ProcessRunner"]

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout: `-m benchmarks...` works
RUN_LIMIT = 900.0  # seconds any one runner process may take
INSTALL_HINT = "pip install -e '.[bench]'"


class ProcessRunner:
    """An engine driven through its runner module, benchmarks/runners/<engine>_runner.py, one
    measurement per process, under the protocol of benchmarks/runners/__init__.py."""

    def __init__(self, name: str, *, fast: bool) -> None:
        self.name, self.fast = name, fast
        self.module = f"benchmarks.runners.{name}_runner"
        self.version, self.missing = _probe(name, self.module)

    def describe(self) -> dict[str, Any]:
        return {"version": self.version, "runner": self.module, "missing": self.missing}

    def argv(self, command: str, url: str, options: Mapping[str, object]) -> list[str]:
        argv = [sys.executable, "-m", self.module, command, "--url", url]
        for name, value in options.items():
            argv += [f"--{name}", str(value)]
        return argv + (["--fast"] if self.fast else [])

    def warm_up(self, fresh: Fresh) -> None:
        """One cold start, not recorded: bytecode compiled, files in the page cache."""
        with fresh() as url:
            argv = self.argv("cold-start", url, {})
            subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=RUN_LIMIT)

    def throughput(self, trial: Recorder, url: str, load: Load) -> Timing:
        options = {"workflows": load.workflows, "steps": load.steps}
        output = self.run(trial, "throughput", url, **options, concurrency=load.concurrency)
        if output.get("completed") != load.workflows:
            raise BenchmarkError(f"completed: {output}", [self.module, "throughput"])
        return Timing(output["start_seconds"], output["total_seconds"])

    def run(self, trial: Recorder, command: str, url: str, **options: object) -> dict[str, Any]:
        """Run one command to its end; its JSON line, recorded in the trial."""
        argv = self.argv(command, url, options)
        try:
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
            raise BenchmarkError(f"still running after {RUN_LIMIT:g} s", argv, stderr) from None
        if done.returncode != 0:
            raise BenchmarkError(f"exited with {done.returncode}", argv, done.stderr)
        lines = done.stdout.strip().splitlines()
        if (output := _json_object(lines[-1]) if lines else None) is None:
            raise BenchmarkError("its last stdout line is not a JSON object", argv, done.stderr)
        return trial.record(self.name, command, options, output)

    def spawn(self, command: str, url: str, options: Mapping[str, object]) -> Child:
        """A command left running, to be read as it goes (and killed)."""
        return Child(self.argv(command, url, options))


def _probe(name: str, module: str) -> tuple[str | None, str | None]:
    """The engine's version, and why it cannot run here (None if it can)."""
    if importlib.util.find_spec(name) is None:
        return None, f"not installed ({INSTALL_HINT})"
    try:
        version: str | None = metadata.version(name)
    except metadata.PackageNotFoundError:
        version = None
    if importlib.util.find_spec(module) is None:
        return version, f"no runner ({module.replace('.', '/')}.py)"
    return version, None


class Child:
    """A process run from the checkout, its stderr collected by a thread (and watched for
    `ready`, a line that says it has started), its stdout read line by line or dropped."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        ready: str | None = None,
        stdout: bool = True,
    ) -> None:
        self.argv, self._ready = argv, ready
        self.ready_at: float | None = None  # perf_counter when it logged `ready`
        self.log: list[str] = []
        self.spawned_at = time.perf_counter()
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=None if env is None else {**os.environ, **env},
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(
            target=self._read_log, name=f"log-{self.process.pid}", daemon=True
        )
        self._reader.start()

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if self.ready_at is None and self._ready is not None and self._ready in line:
                self.ready_at = time.perf_counter()
            self.log.append(line.rstrip())

    def json_line(self, key: str, limit: float) -> dict[str, Any]:
        """The first stdout line that is a JSON object with `key`, within `limit` seconds."""
        assert self.process.stdout is not None
        timer = threading.Timer(limit, self.process.kill)
        timer.start()
        try:
            for line in self.process.stdout:
                if (found := _json_object(line)) is not None and key in found:
                    return found
        finally:
            timer.cancel()
        code = self.process.wait()
        why = f"exited with {code} before printing {{{key!r}: ...}}"
        raise self.failed(f"{why} (killed if still running after {limit:g} s)")

    def wait(self, limit: float) -> int:
        """Its exit code; killed, and a failure, if it runs past `limit` seconds."""
        try:
            return self.process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self.failed(f"still running after {limit:g} s") from None

    def kill(self) -> None:
        self.process.kill()  # SIGKILL
        self.process.wait()

    def tail(self) -> str:
        return " | ".join(self.log[-5:]) or "(nothing logged)"

    def failed(self, why: str) -> BenchmarkError:
        self._reader.join(timeout=5)  # the rest of its stderr, if it has ended
        return BenchmarkError(why, self.argv, "\n".join(self.log))

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._reader.join(timeout=5)


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
