"""Restart an ended run from one of its steps: a new run of the same workflow and input that
reuses what the old one recorded before that step, and runs for real from there.

The new run's history begins with the old run's recorded calls before the step (steps with
their results and idempotency keys, timers, signals, values, approvals), so its replay takes
them as they were; from the step on, its calls are new, with fresh idempotency keys (they
carry the new run's id). Both histories link to each other: the new run's `run_started`
names the old run and the step, and the old run gets a `run_restarted` event naming the new.
The new run keeps the old one's priority, correlation id, queue, key and attributes, so that
whoever found the old one finds it the same way.

Only an ended run is restarted (completed, failed, cancelled, timed out): a run that still
runs would repeat its own work. A parked run is retried in place instead (durably dlq retry,
which can start again from a step). A step whose compensation ran is not reused: its effect
was undone, so the restart must begin at or before it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from durably.client.correlation import trace_parent
from durably.core.audit import Action, Via, audit_of, of_job
from durably.core.children import CHILD
from durably.core.event_data import encode_payload, payload_of, read_payload
from durably.core.history import Event, EventKind
from durably.core.names import check_run_id
from durably.core.payloads import ChildStarted, MessageReceived, Restarted, RunStarted
from durably.core.replay import CALL_KINDS, RunPhase, StepRecord, fold_run
from durably.core.status import FINAL
from durably.errors import DurablyError, RunConflict, RunNotFound
from durably.stores.protocol import Store
from durably.stores.records import NewRun, RunRecord

__all__ = ["restart", "went_wrong_at"]


def restart(
    store: Store,
    run_id: str,
    *,
    from_step: int | str | None,
    now: datetime,
    by: str,
    via: Via,
    new_id: str | None = None,
    job: str | None = None,
) -> RunRecord:
    """Start the new run (pending, due now); return it. `from_step` None: from where the run
    went wrong (every step before it reused). DurablyError, naming what to do, if the run has
    not ended, the step is unknown, or a step before it cannot be reused. `job`: the bulk
    job that restarts it, named in the audit trail."""
    source = store.get_run(run_id)
    if source is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    if source.status not in FINAL:
        raise DurablyError(
            f"cannot restart run {run_id!r}: it is {source.status}, and only an ended run is "
            "restarted (it would repeat its own work). Retry a parked run from a step instead "
            "(durably dlq retry --from-step), or cancel it first"
        )
    events = store.history(run_id)
    phase = fold_run(events)
    if from_step is None:
        position = went_wrong_at(phase)
    else:
        position = _position(phase.steps, from_step, run_id)
    _check_reusable(phase, position, run_id)
    ends = _children_ends(events, position, run_id)
    restarts = sum(1 for event in events if event.kind is EventKind.RUN_RESTARTED)
    new_id = f"{run_id}.restart-{restarts + 1}" if new_id is None else check_run_id(new_id)
    started = RunStarted(
        run_id, position, by, correlation_id=source.correlation_id, trace_parent=trace_parent()
    )  # the restarter's trace, if any
    reused = [
        event
        for event in events
        if (event.kind in CALL_KINDS and event.position is not None and event.position < position)
        or event.seq in ends
    ]
    history = [Event(1, EventKind.RUN_STARTED, now, data=encode_payload(started))]
    history += [replace(event, seq=seq) for seq, event in enumerate(reused, start=2)]
    note = Event(
        0, EventKind.RUN_RESTARTED, now, data=encode_payload(Restarted(new_id, position, by))
    )
    run = NewRun(
        new_id,
        source.workflow,
        source.input,
        priority=source.priority,
        version=source.version,
        correlation_id=source.correlation_id,
        queue=source.queue,
        key=source.key,
        attributes=store.attributes([run_id]).get(run_id, {}),  # found by them, like it
    )
    audit = audit_of(Action.RESTART, by, via, restarted_as=new_id, from_step=position)
    audit = of_job(audit, job)
    if store.fork(run, history, source=run_id, note=note, now=now, audit=audit):
        forked = store.get_run(new_id)
        assert forked is not None
        return forked
    return _found_after_refusal(store, run_id, new_id, started)


def went_wrong_at(phase: RunPhase) -> int:
    """Where a restart begins by default: the first step that failed, was cancelled, was
    undone or has no outcome; after the last step if every one completed (the workflow's
    own code failed, or the run was cancelled while it waited)."""
    for record in phase.steps:
        undone = record.position in phase.compensation_attempts
        if undone or not record.settled or record.error is not None:
            return record.position
    return len(phase.steps)


def _position(steps: list[StepRecord], from_step: int | str, run_id: str) -> int:
    """The position `from_step` names: a position, or the first call of a step so named."""
    if isinstance(from_step, int) and not isinstance(from_step, bool):
        if 0 <= from_step <= len(steps):
            return from_step
        raise DurablyError(
            f"run {run_id!r} has steps #0 to #{len(steps) - 1}; restart from one of them "
            f"(or #{len(steps)}, after the last), not #{from_step}"
        )
    for record in steps:
        if record.name == from_step:
            return record.position
    names = ", ".join(dict.fromkeys(record.name for record in steps)) or "none"
    raise DurablyError(
        f"run {run_id!r} called no step {from_step!r}; its steps: {names}. Give a step's "
        "name or its position (durably runs show lists them)"
    )


def _check_reusable(phase: RunPhase, position: int, run_id: str) -> None:
    for record in phase.steps[:position]:
        where = f"step #{record.position} ({record.name!r})"
        if record.position in phase.compensation_attempts:
            raise DurablyError(
                f"cannot restart run {run_id!r} from step #{position}: {where} was compensated "
                f"(undone) when the run ended, so its result cannot be reused; restart from "
                f"#{record.position} or earlier"
            )
        if record.failure_reason == "cancelled" and record.error is not None:
            raise DurablyError(
                f"cannot restart run {run_id!r} from step #{position}: {where} was cancelled, "
                f"so it has no outcome to reuse; restart from #{record.position} or earlier"
            )
        if not record.settled:
            raise DurablyError(
                f"cannot restart run {run_id!r} from step #{position}: {where} has no outcome "
                f"to reuse; restart from #{record.position} or earlier"
            )


def _children_ends(events: list[Event], position: int, run_id: str) -> set[int]:
    """The seqs of the ends of the children started before `position` (the new run reuses
    them with the starts); refused if one of those children has not ended."""
    reused = {
        read_payload(event, ChildStarted).run: event.position
        for event in events
        if event.kind is EventKind.CHILD_STARTED
        and event.position is not None
        and event.position < position
    }
    ends: set[int] = set()
    for event in events:
        if event.kind is EventKind.MESSAGE_RECEIVED:
            message = read_payload(event, MessageReceived)
            if message.kind == CHILD and message.name in reused:
                ends.add(event.seq)
                del reused[message.name]
    for child, at in reused.items():
        raise DurablyError(
            f"cannot restart run {run_id!r} from step #{position}: its child run {child!r} "
            f"(started at #{at}) has not ended, so its outcome cannot be reused; restart from "
            f"#{at} or earlier"
        )
    return ends


def _found_after_refusal(store: Store, run_id: str, new_id: str, started: RunStarted) -> RunRecord:
    """Why the fork wrote nothing: the id is taken (by this very restart, if an earlier try
    committed and its answer was lost), or the run changed meanwhile."""
    existing = store.get_run(new_id)
    if existing is None:
        raise DurablyError(f"run {run_id!r} changed while restarting it; look again and retry")
    first = store.history(new_id)[:1]
    if first and payload_of(first[0]) == started:
        return existing
    raise RunConflict(
        f"the id {new_id!r} is taken by another run; give the restarted run another id"
    )
