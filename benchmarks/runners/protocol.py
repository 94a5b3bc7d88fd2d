"""The runner protocol from both ends: how the harness drives an engine (`Runner`, over a
`Load`, giving a `Timing`), and the command line an engine's runner process takes
(`parse_command`) and answers on (`emit`), as benchmarks/runners/__init__.py describes it.

Standard library only: a runner process imports this once its cold-start clock runs, and
anything heavier would be counted as the engine's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "CONCURRENCY",
    "BenchmarkError",
    "Fresh",
    "Load",
    "Recorder",
    "Runner",
    "Timing",
    "emit",
    "parse_command",
]


class Recorder(Protocol):
    """Where a runner keeps what its processes printed (a benchmark's Trial)."""

    def record(
        self, engine: str, command: str, options: Mapping[str, object], output: dict[str, Any]
    ) -> dict[str, Any]: ...


CONCURRENCY = 32  # runs in flight at once, unless a load says otherwise

Fresh = Callable[[], AbstractContextManager[str]]  # a new empty store, for one measurement: its URL


class BenchmarkError(Exception):
    """The engine did not do what was measured, or its process failed: no figure may come of it."""

    def __init__(self, why: str, argv: Sequence[str] = (), stderr: str = "") -> None:
        super().__init__(why)
        self.why, self.argv, self.stderr = why, list(argv), stderr

    def report(self) -> str:
        if not self.argv:
            return f"benchmark failed: {self.why}"
        return (
            f"benchmark failed: {' '.join(self.argv)}\n  {self.why}\n"
            f"--- its stderr ---\n{self.stderr.rstrip()}\n--- end of its stderr ---"
        )


@dataclass(frozen=True, slots=True)
class Load:
    """`workflows` workflows of `steps` trivial steps each, at most `concurrency` in flight."""

    workflows: int
    steps: int
    concurrency: int = CONCURRENCY

    def __str__(self) -> str:  # as the tables and the results files name it
        return f"{self.workflows:,} wf x {self.steps} steps"


@dataclass(frozen=True, slots=True)
class Timing:
    """How long a runner took over a load."""

    start_seconds: float | None  # starting every run; None where the engine cannot tell
    total_seconds: float  # from the first start to the last completion

    @property
    def run_seconds(self) -> float:
        """From every run started to every run ended."""
        return self.total_seconds - (self.start_seconds or 0.0)


class Runner(Protocol):
    """An engine as the harness drives it. Adapters: durably in this process
    (benchmarks.runners.inprocess.InProcess) and an engine's runner module in processes of
    its own (benchmarks.runners.processes.ProcessRunner)."""

    name: str  # the engine: durably, dbos
    missing: str | None  # why it cannot run here; None if it can

    def warm_up(self, fresh: Fresh) -> None:
        """Something small and unrecorded first: imports done, files in the page cache."""

    def throughput(self, trial: Recorder, url: str, load: Load) -> Timing:
        """Start every run of `load` on the empty store at `url` and run them to the end;
        raise BenchmarkError unless every one returned what it should."""


# -- the runner process's side -------------------------------------------------------------

COMMANDS: dict[str, dict[str, object]] = {  # the protocol's commands and their defaults
    "throughput": {},
    "w3-work": {"workflows": 500, "steps": 10, "sleep_ms": 10, "concurrency": CONCURRENCY},
    "w3-recover": {"workflows": 500, "steps": 10, "sleep_ms": 10, "concurrency": CONCURRENCY},
    "queue-hop": {"hops": 30, "mode": "in-process"},
    "queue-throughput": {"workflows": 1000, "concurrency": CONCURRENCY},
    "cold-start": {},
}
REQUIRED = {
    "throughput": ("workflows", "steps", "concurrency"),
    "w3-work": ("effects",),
    "w3-recover": ("effects",),
}
MODES: dict[str, tuple[str, ...]] = {"queue-hop": ("in-process", "cross-process")}


def parse_command(
    prog: str,
    argv: Sequence[str] | None,
    *,
    commands: Mapping[str, Mapping[str, object]] | None = None,
    modes: Mapping[str, tuple[str, ...]] | None = None,
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """`<command> --url URL [options]`; a runner adds its own commands and defaults
    (`commands`), --mode values (`modes`) and options (`more`)."""
    defaults = {**COMMANDS}
    for name, own in (commands or {}).items():
        defaults[name] = {**defaults.get(name, {}), **own}
    allowed = {**MODES, **(modes or {})}
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("command", choices=sorted(defaults))
    parser.add_argument("--url", required=True, help="an empty store made for this measurement")
    parser.add_argument("--fast", action="store_true", help="SQLite NORMAL / PostgreSQL off")
    for name in ("workflows", "steps", "concurrency", "sleep-ms", "hops"):
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--effects", help="W3's side-effect sink (a SQLite file)")
    parser.add_argument("--mode", help=", ".join(f"{c}: {'|'.join(m)}" for c, m in allowed.items()))
    if more is not None:
        more(parser)
    args = parser.parse_args(argv)
    for name, value in defaults[args.command].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in REQUIRED.get(args.command, ()):
        if getattr(args, name) is None:
            parser.error(f"{args.command} needs --{name.replace('_', '-')}")
    if (choices := allowed.get(args.command)) and args.mode not in choices:
        parser.error(f"{args.command}: --mode is one of {', '.join(choices)}")
    return args


def emit(figures: Mapping[str, Any]) -> None:
    """The runner's answer: one JSON object, the last line of its stdout."""
    print(json.dumps(figures), file=sys.stdout, flush=True)
