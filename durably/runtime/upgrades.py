"""Upgrades: deploys that never strand runs. A run is pinned to the version of its workflow it
started on, so that only code that runs it the same way ever does; after an edit, runs in
flight on the old version wait for a worker with the old code. `durably upgrade` (and a
worker started with `--upgrade`) finds every run in flight on a version no live worker serves,
rehearses its history against the code being deployed (durably.runtime.rehearsals: no step
runs), and moves each run that the code follows to the code's version, recording an
`upgraded` event (from, to, by). A run the code does not follow stays where it is, listed with
the first call where the code and the history part.

The move is fenced: it is made only if the run still has the history that was rehearsed, is
still on the old version, and no live lease holds it; a run that moved on meanwhile is
reported as changed, to be upgraded again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from durably.core.audit import Action, Via, audit_of
from durably.core.event_data import encode_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import Upgraded
from durably.core.status import FINAL, RunStatus
from durably.runtime.rehearsals import rehearse
from durably.stores import NewRun, RunRecord, Store
from durably.workflow.registry import Registry

__all__ = ["Outcome", "Upgrade", "stranded", "upgrade"]

_IN_FLIGHT = tuple(status for status in RunStatus if status not in FINAL)
_PAGE = 500  # runs read a query, and rehearsed together in one throwaway store


class Outcome(StrEnum):
    MOVED = "moved"  # now on the deployed code's version
    WOULD_MOVE = "would move"  # a dry run: the code follows its history
    DIVERGES = "diverges"  # the code does not follow its history: it stays
    CHANGED = "changed"  # it moved on while it was rehearsed: upgrade again


@dataclass(frozen=True, slots=True)
class Upgrade:
    """What an upgrade did with one stranded run. `why`: for a run that diverges, where the
    code and the history part (or why else the rehearsal stopped); for a changed one, what
    changed."""

    run_id: str
    workflow: str
    from_version: str
    to_version: str
    outcome: Outcome
    why: str | None = None


def upgrade(
    store: Store,
    registry: Registry,
    *,
    now: datetime,
    by: str,
    workflow: str | None = None,
    dry_run: bool = False,
    via: Via | None = None,
) -> list[Upgrade]:
    """Rehearse every stranded run (of `workflow`, or of every workflow `registry` defines)
    against `registry`'s code and move each that it follows to its version (with `dry_run`,
    only say which would move). One Upgrade a stranded run, in the order found. `via`: how a
    person asked for it (each move is then in the audit trail, by `by`)."""
    if workflow is not None:
        registry.workflow_named(workflow)  # UnknownWorkflow, naming the known ones
    done: list[Upgrade] = []
    for page in _pages(stranded(store, registry, now=now, workflow=workflow)):
        read = store.histories([run.id for run in page])  # one read for the page
        histories = [read.get(run.id, []) for run in page]
        tried = [
            (NewRun(run.id, run.workflow, run.input), history)
            for run, history in zip(page, histories, strict=True)
        ]
        for (run, history), rehearsal in zip(
            zip(page, histories, strict=True), rehearse(registry, tried), strict=True
        ):
            assert run.version is not None  # a run of no version is served by every worker
            to = registry.workflows[run.workflow].version
            said = Upgrade(run.id, run.workflow, run.version, to, Outcome.WOULD_MOVE)
            if rehearsal.problem is not None:
                done.append(_with(said, Outcome.DIVERGES, rehearsal.problem.message))
            elif dry_run:
                done.append(said)
            else:
                done.append(_move(store, said, history, by=by, via=via, now=now))
    return done


def stranded(
    store: Store, registry: Registry, *, now: datetime, workflow: str | None = None
) -> Iterator[RunRecord]:
    """The runs in flight (not ended) of the workflows `registry` defines (or of `workflow`)
    on a version that neither a live worker nor this code serves."""
    live = [worker for worker in store.workers() if worker.alive(now)]
    for name, definition in registry.workflows.items():
        if workflow is not None and name != workflow:
            continue
        served = set(definition.serves)
        served.update(v for worker in live for v in worker.serves.get(name, ()))
        for status in _IN_FLIGHT:
            for run in _every(store, status=status, workflow=name):
                if run.version is not None and run.version not in served:
                    yield run


def _every(store: Store, *, status: RunStatus, workflow: str) -> Iterator[RunRecord]:
    after: tuple[datetime, str] | None = None
    while True:
        page = store.runs(status=status, workflow=workflow, limit=_PAGE, after=after)
        yield from page
        if len(page) < _PAGE:
            return
        after = (page[-1].updated_at, page[-1].id)


def _pages(runs: Iterator[RunRecord]) -> Iterator[list[RunRecord]]:
    page: list[RunRecord] = []
    for run in runs:
        page.append(run)
        if len(page) == _PAGE:
            yield page
            page = []
    if page:
        yield page


def _move(
    store: Store,
    said: Upgrade,
    history: Sequence[Event],
    *,
    by: str,
    via: Via | None,
    now: datetime,
) -> Upgrade:
    note = Event(
        0,
        EventKind.UPGRADED,
        now,
        data=encode_payload(Upgraded(said.from_version, said.to_version, by)),
    )
    seen = history[-1].seq
    versions = {"from": said.from_version, "to": said.to_version}
    audit = None if via is None else audit_of(Action.UPGRADE, by, via, **versions)
    if store.move_version(
        said.run_id,
        from_version=said.from_version,
        to_version=said.to_version,
        seen=seen,
        note=note,
        now=now,
        audit=audit,
    ):
        return _with(said, Outcome.MOVED)
    run = store.get_run(said.run_id)
    if run is not None and run.version == said.to_version:  # moved (a retried commit)
        return _with(said, Outcome.MOVED)
    return _with(said, Outcome.CHANGED, _what_changed(run, said, seen, now))


def _what_changed(run: RunRecord | None, said: Upgrade, seen: int, now: datetime) -> str:
    if run is None:
        return "it was deleted meanwhile"
    if run.status in FINAL:
        return f"it ended ({run.status}) meanwhile"
    if run.version != said.from_version:
        return f"it moved to version {run.version} meanwhile"
    if run.status is RunStatus.RUNNING and run.available_at and run.available_at > now:
        return f"worker {run.lease_owner} holds its lease: upgrade again once it lets go"
    return f"its history grew from {seen} to {run.event_count} events: upgrade again"


def _with(said: Upgrade, outcome: Outcome, why: str | None = None) -> Upgrade:
    return Upgrade(said.run_id, said.workflow, said.from_version, said.to_version, outcome, why)
