"""Handing out a limited queue's free slots between keys (durably.core.queues): pure.

A claim reads, for the next keys in turn (in the order of their names, from where the last
claim stopped, wrapping around), each key's first due runs and the slots and begins each
already holds; `share` then takes one run of each key in turn, then a second of each, and so
on, skipping a key whose slots or rate are spent, until the claim's limit or the queue's is
reached. Every key with due work is visited once in a round, so a key with one due run is
served by the round that reaches it, however many runs other keys have waiting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from durably.core.queues import Queue

__all__ = ["Candidate", "Counts", "share"]

_NO_LIMIT = 1 << 62


@dataclass(frozen=True, slots=True)
class Candidate:
    """A due run a claim may take: its id, its key, and whether it began already (a run that
    began is never held back by a rate)."""

    run_id: str
    key: str | None
    began: bool


@dataclass(frozen=True, slots=True)
class Counts:
    """What a queue's runs hold now: slots in use and runs begun in its rates' windows, in all
    and by key (keys not listed hold none)."""

    busy: int = 0
    begun: int = 0
    busy_by_key: Mapping[str | None, int] | None = None
    begun_by_key: Mapping[str | None, int] | None = None


def share(
    queue: Queue,
    heads: Sequence[tuple[str | None, Sequence[Candidate]]],
    counts: Counts,
    *,
    limit: int,
) -> list[Candidate]:
    """The runs to take from `heads` (each key's first due runs, keys in turn order, runs in
    claim order): round-robin between keys, within `limit` and the queue's limits."""
    left = limit if queue.concurrency is None else min(limit, queue.concurrency - counts.busy)
    fresh = _NO_LIMIT if queue.rate is None else queue.rate.count - counts.begun
    busy, begun = counts.busy_by_key or {}, counts.begun_by_key or {}
    per_key = queue.concurrency_per_key
    slots = {key: _NO_LIMIT if per_key is None else per_key - busy.get(key, 0) for key, _ in heads}
    rate = queue.rate_per_key
    fresh_of = {
        key: _NO_LIMIT if rate is None else rate.count - begun.get(key, 0) for key, _ in heads
    }
    waiting = {key: list(runs) for key, runs in heads}
    taken: list[Candidate] = []
    while left > 0:
        took = False
        for key, _ in heads:
            if left <= 0:
                break
            run = _next(waiting[key], slots[key], min(fresh, fresh_of[key]))
            if run is None:
                continue
            taken.append(run)
            took, left, slots[key] = True, left - 1, slots[key] - 1
            if not run.began:
                fresh, fresh_of[key] = fresh - 1, fresh_of[key] - 1
        if not took:
            break
    return taken


def _next(runs: list[Candidate], slots: int, fresh: int) -> Candidate | None:
    """The key's next run it may take now (removed from `runs`), if any: none without a free
    slot; one that has not begun only while its rates allow a begin."""
    if slots <= 0:
        return None
    for index, run in enumerate(runs):
        if run.began or fresh > 0:
            return runs.pop(index)
    return None
