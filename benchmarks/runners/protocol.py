"""The runner protocol from both ends: how the harness drives an engine (a `Runner`, over a
`Load`, giving a `Timing`), and the command line of an engine's runner module, which makes
one measurement per process:

    python -m benchmarks.runners.<engine>_runner COMMAND --url URL [--NAME VALUE]... [--fast]

URL names an empty store (`sqlite:////abs/dir/engine.db`, or a new PostgreSQL database),
which the runner keeps in WAL with synchronous=FULL, or synchronous_commit=on (--fast: NORMAL,
off). It prints progress to stderr and one JSON object, the last line of stdout, and exits
non-zero, saying why, if the engine did not do the work. The commands (each runner's
docstring tells how its engine does them): throughput (-> start_seconds, total_seconds,
completed), w3-work (prints {"started": N}, then works until SIGKILLed), w3-recover
(-> ready_seconds, completed), queue-hop (-> hop_ms), queue-throughput (-> total_seconds,
completed), cold-start (-> ready_seconds), roundtrip (-> roundtrip_ms, heard_after_end_ms).

Standard library only: a runner imports this once its cold-start clock runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from benchmarks.plan import Trial

__all__ = ["CONCURRENCY", "BenchmarkError", "Load", "Runner", "Timing", "durable", "emit"]

CONCURRENCY = 32  # runs in flight at once, unless a load says otherwise
Fresh = Callable[[], AbstractContextManager[str]]  # a new empty store, for one measurement


class BenchmarkError(Exception):
    """The engine did not do what was measured, or its process failed: no figure comes of it."""

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

    def __str__(self) -> str:
        return f"{self.workflows:,} wf x {self.steps} steps"


@dataclass(frozen=True, slots=True)
class Timing:
    start_seconds: float | None  # starting every run; None where the engine cannot tell
    total_seconds: float  # from the first start to the last completion

    @property
    def run_seconds(self) -> float:
        return self.total_seconds - (self.start_seconds or 0.0)


class Runner(Protocol):
    """An engine as the harness drives it: durably in this process (runners.inprocess), or
    an engine's runner module in processes of its own (runners.processes)."""

    name: str  # the engine: durably, dbos
    missing: str | None  # why it cannot run here; None if it can

    def warm_up(self, fresh: Fresh) -> None:
        """Something small and unrecorded first: imports done, files in the page cache."""

    def throughput(self, trial: Trial, url: str, load: Load) -> Timing:
        """Start every run of `load` on the empty store at `url` and run them to the end."""


def durable(url: str, *, fast: bool = False) -> str:
    """A store's URL with the durability asked for, which durably sets per connection."""
    separator = "&" if "?" in url else "?"
    if url.startswith("sqlite:"):
        return f"{url}{separator}synchronous={'NORMAL' if fast else 'FULL'}"
    return f"{url}{separator}synchronous_commit={'off' if fast else 'on'}"


def parse_command(argv: Sequence[str]) -> tuple[str, SimpleNamespace]:
    """COMMAND --url URL [--NAME VALUE]... [--fast]: the command, its options (numbers as
    numbers)."""
    command, *rest = argv
    options: dict[str, Any] = {"fast": "--fast" in rest}
    pairs = [item for item in rest if item != "--fast"]
    for name, value in zip(pairs[::2], pairs[1::2], strict=True):
        number = value.lstrip("-").replace(".", "", 1).isdigit()
        parsed = (float(value) if "." in value else int(value)) if number else value
        options[name.removeprefix("--").replace("-", "_")] = parsed
    return command, SimpleNamespace(**options)


def emit(figures: Mapping[str, Any]) -> None:
    """The runner's answer: one JSON object, the last line of its stdout."""
    print(json.dumps(figures), flush=True)
