"""The runner protocol: an engine's runner module makes one measurement per process,
`python -m benchmarks.runners.<engine>_runner COMMAND '{"url": URL, "fast": false, ...}'`,
on the empty store at URL (WAL and synchronous=FULL, or synchronous_commit=on; fast: NORMAL,
off). It prints one JSON object, the last line of its stdout, and exits non-zero, saying why,
if the engine did not do the work. Commands: throughput, w3-work (prints {"started": N}, then
works until SIGKILLed), w3-recover, queue-hop, queue-throughput, cold-start, roundtrip,
debounce; the queues benchmark's queue-drain and small-key (on QUEUE, of a kind in
QUEUE_KINDS, runs keyed by key_of). Here too: the steps both runners share, and W3's effects
in a SQLite file outside every store (a key applied twice: an effect that happened twice in
the world, a card charged twice).
Standard library only: runners import this once their cold-start clock runs."""

import asyncio
import json
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

Figures = dict[str, Any]  # a command's answer
STOP_AT = "DURABLY_BENCH_STOP_AT"  # env: the chain step input that kills a worker process
CLAIMS = "DURABLY_BENCH_CLAIMS"  # env: where a worker process writes its timed claims
QUEUE = "tenants"  # the queue the queue commands put keyed runs on
# How queue-drain puts its runs on a queue: none (no queue, no key); declared (no queue, no
# key, by an app that declares a fair queue it never uses); fair (a fair queue, no limits);
# per-key (at most `per_key` runs of a key at once; DBOS: a partitioned queue).
QUEUE_KINDS = ("none", "declared", "fair", "per-key")
_local = threading.local()  # each thread's connection to the effects file


class BenchmarkError(Exception):
    """The engine did not do what was measured, or its process failed: no figure comes of it."""


@dataclass(frozen=True, slots=True)
class Load:
    """`workflows` workflows of `steps` trivial steps each, at most `concurrency` in flight."""

    workflows: int
    steps: int
    concurrency: int = 32

    def __str__(self) -> str:
        return f"{self.workflows:,} wf x {self.steps} steps"


def durable(url: str, *, fast: bool = False) -> str:
    """A store's URL with the durability asked for, which durably sets per connection."""
    separator = "&" if "?" in url else "?"
    if url.startswith("sqlite:"):
        return f"{url}{separator}synchronous={'NORMAL' if fast else 'FULL'}"
    return f"{url}{separator}synchronous_commit={'off' if fast else 'on'}"


def main(engine: str, commands: Sequence[Callable[[SimpleNamespace], Figures | None]]) -> None:
    """A runner's entry point: COMMAND OPTIONS run, its figures emitted; or exit, saying why."""
    command, options = sys.argv[1], json.loads(sys.argv[2])
    options["store"] = durable(options["url"], fast=options["fast"])  # as durably opens it
    run = next(run for run in commands if run.__name__ == command.replace("-", "_"))
    try:
        emit(run(SimpleNamespace(**options)) or {})
    except BenchmarkError as exc:
        sys.exit(f"{engine} runner: {command}: {exc}")


def emit(figures: Mapping[str, Any]) -> None:
    """The runner's answer: one JSON object, the last line of its stdout."""
    print(json.dumps(figures), flush=True)


def create_effects(path: Path) -> None:
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL)")


async def apply_effect(path: str, key: str, sleep_ms: int) -> None:
    """W3's step: sleep, then record one application of the effect `key` (committed)."""
    await asyncio.sleep(sleep_ms / 1000)
    db: sqlite3.Connection | None = getattr(_local, "db", None)
    if db is None:
        db = _local.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        db.execute("PRAGMA synchronous = NORMAL")
    db.execute("INSERT INTO effects (key) VALUES (?)", (key,))


def count_effects(path: Path) -> tuple[int, int]:
    """How many distinct effects were applied, and applications beyond the first of a key."""
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT count(DISTINCT key), count(*) FROM effects").fetchone()
    return int(row[0]), int(row[1]) - int(row[0])


def keys(mode: str) -> int:
    """How many debounce keys the starts of a debounce `mode` spread over."""
    return 100 if mode == "keys" else 1


def key_of(run: int, workflows: int, keys: int) -> str:
    """The key of run `run` of `workflows` spread over `keys`: a key's runs are started
    together, as a customer's batch is."""
    return f"customer-{run * keys // workflows}"


async def add_one(x: int) -> int:
    return x + 1


async def since(t0: float) -> float:
    """How long ago (time.time()) t0 was: the hop's step."""
    return time.time() - t0
