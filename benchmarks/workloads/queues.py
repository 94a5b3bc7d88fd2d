"""What queues and keys cost (the queues benchmark), each engine's runner on a fresh store: a
backlog started first, then only its drain timed (queue-drain), on a queue that lets one run
of a key at a time over many keys, and W1 on no queue against a fair queue and a per-key
one; a run of a small key behind a deep backlog of a big one (small-key); and durably's
claims straight on the store as a queue's due runs grow. DBOS 3.4's nearest features: a
plain queue for no queue (it runs no backlog without one), a partitioned queue for a per-key
limit; it has nothing like a fair queue without limits, so those cells are n/a.
"""

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta

from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.protocol import BenchmarkError, Load, durable
from benchmarks.stores import LEASE, vacuum
from benchmarks.workloads.engines import run
from durably import RunStatus
from durably.client.ids import new_run_id
from durably.core.queues import Queue
from durably.stores import Checkpoint, NewRun, Store, open_store
from durably.testing import FakeClock

# Overhead's variants (protocol.QUEUE_KINDS): what each puts the runs on, and whether DBOS
# has something like it (its plain queue for no queue, a partitioned queue for per-key).
VARIANTS = {
    "none": ("no queue, no key (DBOS: a plain queue)", True),
    "declared": ("no queue, no key, a fair queue declared", False),
    "fair": ("a fair queue, no limits", False),
    "per-key": ("1 run per key at once", True),
}


@dataclass(frozen=True, slots=True)
class Spread:
    """`workflows` one-step runs over `keys` keys, a key's runs started together."""

    workflows: int
    keys: int


def per_key(trial: Trial, spreads: tuple[Spread, ...]) -> Values:
    """Each spread on a queue that runs one run of a key at a time: runs/s to drain it."""
    values: Values = {}
    for spread in spreads:
        options = {"workflows": spread.workflows, "steps": 1, "concurrency": 32}
        output = run(trial, "queue-drain", **options, queue="per-key", keys=spread.keys, per_key=1)
        label = f"{spread.workflows:,} one-step wf over {spread.keys:,} keys, 1 per key, c=32"
        key = f"per_key_{spread.workflows}_over_{spread.keys}_per_s"
        values[Metric(key, label, "workflows/s", True)] = spread.workflows / output["total_seconds"]
    return values


def small_key(trial: Trial, size: tuple[int, int]) -> Values:
    """Runs of key "small", one at a time, while a worker (32 slots, all busy) drains a
    backlog of key "big": each one's start -> result (pooled over the repetitions)."""
    backlog, samples = size
    output = run(trial, "small-key", backlog=backlog, samples=samples, concurrency=32)
    if len(small_ms := output["small_ms"]) != samples:
        raise BenchmarkError(f"{len(small_ms)} small runs, not {samples}")
    label = f'1 run of key "small" behind {backlog:,} due of "big": start -> result'
    return {
        Metric("small_key_ms", label, "ms (median)"): small_ms,
        Metric("small_key_p95_ms", label, "ms (p95)", p95=True): small_ms,
    }


def overhead(trial: Trial, size: tuple[Load, int]) -> Values:
    """W1 on no queue and on each queue of VARIANTS that the engine has (over `keys` keys),
    taking turns going first; each queue's change against no queue, in %."""
    load, keys = size
    kinds = [kind for kind, (_, dbos_has) in VARIANTS.items() if dbos_has or trial.name != "dbos"]
    turn = (trial.repetition - 1) % len(kinds)
    per_s: dict[str, float] = {}
    for kind in kinds[turn:] + kinds[:turn]:
        output = run(trial, "queue-drain", **asdict(load), queue=kind, keys=keys, per_key=1)
        per_s[kind] = load.workflows / output["total_seconds"]
    workload = f"W1 ({load}, c={load.concurrency})"
    values: Values = {}
    for kind, rate in per_s.items():
        what = VARIANTS[kind][0] + ("" if kind in ("none", "declared") else f", {keys} keys")
        values[Metric(f"w1_{kind}_per_s", f"{workload}, {what}", "workflows/s", True)] = rate
    for kind in kinds[1:]:
        label = f"{workload}, {VARIANTS[kind][0]}, against no queue"
        values[Metric(f"w1_{kind}_change", label, "%")] = 100 * (per_s[kind] / per_s["none"] - 1)
    return values


@dataclass(frozen=True, slots=True)
class Depths:
    """Stores whose one queue holds each of `due` runs due now, over `keys` keys, from which
    `claims` claims of `take` are timed per kind of queue."""

    due: tuple[int, ...]
    claims: int
    keys: int = 1_000
    take: int = 32


# How a claim serves the queue of Depths's runs: as a plain queue (the claim-rank index, no
# counting), fair (the window over its due runs), and fair with 1 per key (the slots too).
CLAIMED_AS = {
    "plain": Queue("q", fair=False),
    "fair": Queue("q"),
    "per_key": Queue("q", concurrency_per_key=1),
}
CLAIM_LABELS = {"plain": "fair=False", "fair": "fair", "per_key": "fair, 1 per key"}
DUE_AT = FakeClock().now() - timedelta(hours=1)  # the filled runs': before every claim's time


def claims(trial: Trial, size: Depths) -> Values:
    """durably's claims straight on the store (no worker), from a queue of each depth, each
    claim's runs handed back (untimed), due as before, so that every claim sees the same due
    runs: each claim's ms, by kind of queue. DBOS: none (its claims are not a call of its own)."""
    if trial.name != "durably":
        return {}
    values: Values = {}
    for due, url in trial.keep(lambda: filled(trial, size)).items():
        store = open_store(url)
        for kind, queue in CLAIMED_AS.items():
            label = f"a claim of {size.take} from {due:,} due on one queue, {CLAIM_LABELS[kind]}"
            values[Metric(f"claim_{kind}_{due}_ms", label, "ms")] = timed_claims(store, queue, size)
        store.close()
    return values


def timed_claims(store: Store, queue: Queue, size: Depths) -> list[float]:
    """`size.claims` claims of `size.take` runs of the queue, each handed back after, due at
    DUE_AT again: ms each."""
    clock, samples = FakeClock(), []
    for _ in range(size.claims):
        clock.advance(timedelta(milliseconds=1))  # a claim's time tells it from the others
        now = clock.now()
        began = time.perf_counter()
        taken = store.claim("bench", ["job"], now=now, lease=LEASE, limit=size.take, queues=[queue])
        samples.append(1000 * (time.perf_counter() - began))
        if len(taken) != size.take:
            raise BenchmarkError(f"a claim from {queue} took {len(taken)} runs, not {size.take}")
        back = RunStatus.PENDING
        store.commit(
            [Checkpoint(c.run_id, c.epoch, (), back, available_at=DUE_AT) for c in taken], now=now
        )
    return samples


@contextmanager
def filled(trial: Trial, size: Depths) -> Iterator[dict[int, str]]:
    """A store per depth: its runs of "job" on queue "q", due at DUE_AT, a thousand a
    transaction, key n % keys each (vacuumed): its URL (at the durability of the store)."""
    with ExitStack() as stores:
        urls: dict[int, str] = {}
        for due in size.due:
            url = stores.enter_context(trial.fresh())
            url = durable(url, fast=trial.store.fast) if trial.store.runner_processes else url
            store = open_store(url)
            for first in range(0, due, 1_000):
                keys = [f"k{n % size.keys}" for n in range(first, min(due, first + 1_000))]
                store.create_runs(
                    [NewRun(new_run_id(), "job", "[]", queue="q", key=k) for k in keys], now=DUE_AT
                )
            store.close()
            vacuum(url)
            urls[due] = url
        yield urls
