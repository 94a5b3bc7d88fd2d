"""One sentence that says what a run is doing now and what happens next, and what a person
can do about it: the line at the top of `durably runs show` and of the dashboard's run page.

    waiting: retry 3/5 of charge at 14:03:11, Throttled by payments

Pure: it reads the run's record, its history, the workers' beats and the time, nothing else.
Times are shown as the store keeps them (UTC), to the second.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from durably.client.dead_letters import STEP_FAILED, step_parked
from durably.core.approvals import fold_approvals
from durably.core.children import unfinished_children
from durably.core.control import fold_control
from durably.core.event_data import payload_of
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import AttemptFailed, StepFailed, StepWaiting
from durably.core.queues import DEFAULT_QUEUE
from durably.core.replay import StepRecord, fold_run
from durably.core.status import RunStatus
from durably.errors import PayloadError
from durably.stores.records import RunRecord, WorkerBeat

__all__ = ["Explanation", "explain", "root_cause", "root_error", "runners"]


@dataclass(frozen=True, slots=True)
class Explanation:
    """`now`: what the run is doing (or how it ended); `next`: what happens next, or what a
    person can do. `sentence` joins them."""

    now: str
    next: str

    @property
    def sentence(self) -> str:
        return f"{self.now}; {self.next}" if self.next else self.now


def explain(
    run: RunRecord,
    events: Sequence[Event],
    workers: Sequence[WorkerBeat] = (),
    now: datetime | None = None,
) -> Explanation:
    """What `run` is doing now and what happens next, in words."""
    status = run.status
    if status is RunStatus.COMPLETED:
        return Explanation(f"completed at {_clock(run.updated_at)}", "nothing more happens")
    if status in (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED):
        return _ended(run, events)
    if status is RunStatus.PAUSED:
        pause = fold_control(events).pause
        who = "" if pause is None else f" by {pause.by} at {_clock(pause.at)}"
        why = "" if pause is None or not pause.reason else f" ({pause.reason})"
        return Explanation(
            f"paused{who}{why}",
            f"no step starts until a person resumes it (durably resume {_id(run)})",
        )
    if status in (RunStatus.NEEDS_ATTENTION, RunStatus.COMPENSATION_FAILED):
        return _parked(run, events)
    said = (_running if status is RunStatus.RUNNING else _pending)(run, events, workers, now)
    left = None if now is None else _left_behind(run, workers, now)
    return said if left is None else Explanation(said.now, left)


def root_cause(events: Sequence[Event]) -> str | None:
    """The failure everything else followed from, in words: what stopped the run going
    forward (the error that began its compensation, parked or failed it) or, when that was
    a step's failure, that step's own error. A failure the workflow caught and went past is
    not it."""
    found = _root(events)
    if found is None:
        return None
    error, failed = found
    if failed is None:
        return _error(error)  # not a step's failure
    return f"step {failed.name} failed ({failed.reason}) with {_error(error)}"


def root_error(events: Sequence[Event]) -> ErrorInfo | None:
    """The error of `root_cause` (a step's own, with the class it raised), for counting."""
    found = _root(events)
    return None if found is None else found[0]


@dataclass(frozen=True, slots=True)
class _Failed:
    name: str | None
    reason: str


def _root(events: Sequence[Event]) -> tuple[ErrorInfo, _Failed | None] | None:
    """The root cause's error, and the step that failed with it (None: no step did)."""
    failed: tuple[ErrorInfo, _Failed] | None = None
    for event in events:
        if event.kind in _GAVE_UP:
            error = getattr(_payload(event), "error", None)
            if isinstance(error, ErrorInfo) and error.error_class != STEP_FAILED:
                return error, None  # not a step's failure
            break
        if event.kind is EventKind.STEP_FAILED:
            payload = _payload(event)
            if isinstance(payload, StepFailed):
                failed = payload.error, _Failed(event.name, payload.reason)
    return failed


# where a run gives up going forward: its error says what stopped it
_GAVE_UP = frozenset({EventKind.COMPENSATING, EventKind.RUN_PARKED, EventKind.RUN_FAILED})


def _ended(run: RunRecord, events: Sequence[Event]) -> Explanation:
    when = _clock(run.updated_at)
    undone = _undone(events)
    if run.status is RunStatus.CANCELLED:
        cancel = fold_control(events).cancel
        who = "" if cancel is None else f" by {cancel.by}"
        return Explanation(f"cancelled{who} at {when}{undone}", "nothing more happens")
    if run.status is RunStatus.TIMED_OUT:
        return Explanation(f"timed out at {when}: its deadline passed{undone}", _restart(run))
    cause = root_cause(events)
    error = "" if run.error is None else _error(run.error)
    why = cause if cause is not None and "FailedByPerson" not in error else error
    return Explanation(f"failed at {when}: {why}{undone}", _restart(run))


def _restart(run: RunRecord) -> str:
    return f"nothing more happens unless a person restarts it (durably runs restart {_id(run)})"


def _undone(events: Sequence[Event]) -> str:
    phase = fold_run(events)
    if phase.compensating is None:
        return ""
    if phase.compensated:
        return f"; {len(phase.compensated)} completed step(s) were compensated"
    return "; it had no completed step to compensate"


def _parked(run: RunRecord, events: Sequence[Event]) -> Explanation:
    pending = [approval for approval in fold_approvals(events) if approval.pending]
    if pending:
        approval = pending[0]
        until = "" if approval.until is None else f" until {_clock(approval.until)}"
        escalated = " (escalated)" if approval.escalated else ""
        return Explanation(
            f"waiting for a person: approval {approval.name!r}{escalated}{until}",
            f"approve or reject it (durably approve {_id(run)} {shlex.quote(approval.name)})",
        )
    cause, run_id = root_cause(events), _id(run)
    actions = (
        f"retry (durably dlq retry {run_id}), skip the step with a result (durably dlq skip "
        f"{run_id} --result JSON) or give up (durably dlq fail {run_id} --reason TEXT)"
    )
    if run.status is RunStatus.COMPENSATION_FAILED:
        undo = "" if run.error is None else f": {_error(run.error)}"
        after = "" if cause is None else f", after {cause}"
        return Explanation(
            f"parked for a person: an undo failed{undo}{after}",
            f"nothing runs until a person acts: retry the undo (durably dlq retry {run_id}), "
            f"do it by hand and skip it (durably dlq skip {run_id}) or give up on the rest "
            f"(durably dlq fail {run_id} --reason TEXT)",
        )
    failed = _last_failed(events) if step_parked(run) else None
    if failed is None or failed.call != "step":  # no step to skip: retry or give up
        what = cause or ("" if run.error is None else _error(run.error))
        return Explanation(
            f"parked for a person: {what}",
            f"nothing runs until a person acts: retry (durably dlq retry {run_id}) or give up "
            f"(durably dlq fail {run_id} --reason TEXT)",
        )
    if failed.failure_reason == "escalated":
        return Explanation(
            f"waiting for a person: step {failed.name} escalated ({_message(failed)})",
            f"a person answers yes (durably approve {run_id} durably.escalate) or no (durably "
            f"reject {run_id} durably.escalate), or acts on it: {actions}",
        )
    what = cause or ("" if run.error is None else _error(run.error))
    tries = f" after {failed.attempts} attempt(s)"
    return Explanation(
        f"parked for a person{tries}: {what}", f"nothing runs until a person acts: {actions}"
    )


def _running(
    run: RunRecord, events: Sequence[Event], workers: Sequence[WorkerBeat], now: datetime | None
) -> Explanation:
    owner = run.lease_owner or "a worker"
    if now is not None and run.available_at is not None and run.available_at <= now:
        return Explanation(
            f"stranded: the lease of worker {owner} expired at {_clock(run.available_at)}, "
            "and the worker is presumed dead (its attempt in flight is lost)",
            _taker(run, workers, now, when="the next worker to poll takes it over"),
        )
    silent = None if now is None else _silence(run, workers, now)
    if silent is not None and now is not None and run.available_at is not None:
        left = (run.available_at - now).total_seconds()
        return Explanation(
            f"held by worker {owner}, silent for {silent:.0f} s and presumed dead (its attempt "
            "in flight is lost)",
            f"another worker takes it over when its lease expires at {_clock(run.available_at)} "
            f"(in {left:.0f} s), or at once after a person releases its leases (durably runs "
            f"release {_id(run)})",
        )
    cancel = fold_control(events).cancel
    if cancel is not None:
        return Explanation(
            f"cancelling (asked by {cancel.by}) on worker {owner}",
            "its completed steps are being compensated, then it ends cancelled",
        )
    flight = [record for record in fold_run(events).steps if record.in_flight]
    if flight:
        step = flight[-1]
        return Explanation(
            f"running step #{step.position} {step.name} (attempt {step.attempts}) on worker "
            f"{owner}",
            "the workflow goes on when it returns",
        )
    return Explanation(f"running on worker {owner}", "the workflow goes on")


def _pending(
    run: RunRecord, events: Sequence[Event], workers: Sequence[WorkerBeat], now: datetime | None
) -> Explanation:
    later = run.available_at is None or now is None or run.available_at > now
    if run.gathering and later:
        return _gathering(run)
    waiting = _waiting_for(run, events)
    if waiting is not None and later:
        return waiting
    due = "now" if run.available_at is None else f"since {_clock(run.available_at)}"
    on = "" if run.queue is None else f" on queue {run.queue}"
    key = "" if run.key is None else f" (key {run.key})"
    return Explanation(
        f"queued{on}{key}: due {due}, waiting for a worker to claim it",
        _taker(run, workers, now, when="a worker claims it at its next poll"),
    )


def _gathering(run: RunRecord) -> Explanation:
    """A debounced run no worker has claimed yet (durably.core.debounce)."""
    due = "" if run.available_at is None else f", runs at {_clock(run.available_at)}"
    latest = "" if run.due_by is None else f" ({_clock(run.due_by)} at the latest)"
    return Explanation(
        f"debouncing on {run.debounce!r}: {run.gathered} start(s) so far{due}{latest}",
        "each start with this key meanwhile gives it its input and pushes it back; then a "
        "worker claims it with the last start's input",
    )


def _waiting_for(run: RunRecord, events: Sequence[Event]) -> Explanation | None:
    """What a pending run waits for: a retry, a timer, a signal, a child, a breaker."""
    children = unfinished_children(events)
    last = _last_event_of_step(events)
    due = run.available_at
    at = "" if due is None else f" at {_clock(due)}"
    if last is not None and last.kind is EventKind.STEP_ATTEMPT_FAILED:
        failed = _payload(last)
        if isinstance(failed, AttemptFailed):
            tries = f"{(last.attempt or 0) + 1}/{failed.of}" if failed.of else f"{last.attempt}"
            by = f" by {failed.dependency}" if failed.dependency else ""
            cause = _short_class(failed.error.error_class) + by
            if not by:
                cause += f": {_clip(failed.error.message)}"
            return Explanation(f"waiting: retry {tries} of {last.name}{at}, {cause}", "")
    if last is not None and last.kind is EventKind.STEP_WAITING:
        gate = _payload(last)
        if isinstance(gate, StepWaiting):
            return Explanation(
                f"waiting: {gate.waiting} for {gate.dependency} until {_clock(gate.until)}",
                f"then step {last.name} is tried",
            )
    if last is not None and last.kind is EventKind.TIMER_SET:
        return Explanation(f"sleeping until {_clock(due) if due else 'its time'}", "then goes on")
    if last is not None and last.kind is EventKind.SIGNAL_WAITING and last.name:
        name = last.name.removeprefix("durably.signal:")
        until = "with no timeout" if due is None else f"until {_clock(due)}"
        return Explanation(
            f"waiting for signal {name!r} {until}",
            f"send it (durably signal {_id(run)} {shlex.quote(name)} --data JSON)",
        )
    if children:
        return Explanation(f"waiting for its child run {children[0]} to end", "then goes on")
    if due is not None:
        return Explanation(f"waiting until {_clock(due)}", "then a worker claims it")
    return None


def _taker(
    run: RunRecord, workers: Sequence[WorkerBeat], now: datetime | None, *, when: str
) -> str:
    """Who will pick the run up: a live worker that serves its workflow and version."""
    if now is None:
        return when
    live = runners(run, workers, now)
    if live:
        return f"{when} ({', '.join(sorted(w.name for w in live))})"
    queue = run.queue or DEFAULT_QUEUE
    if any(w.alive(now) and run.workflow in w.serves for w in workers):
        return (
            f"waiting for a worker on queue {queue}; none is live: start one "
            f"(durably worker MODULE:ATTR --queues {shlex.quote(queue)})"
        )
    return (
        f"no live worker runs workflow {run.workflow!r}"
        + ("" if run.version is None else f" at version {run.version}")
        + ": start one (durably worker MODULE:ATTR)"
    )


def _silence(run: RunRecord, workers: Sequence[WorkerBeat], now: datetime) -> float | None:
    """Seconds since the worker holding the run last beat, if it missed three beats (it is
    presumed dead); None while it beats, or if it never said it was alive."""
    for worker in workers:
        if worker.name == run.lease_owner and not worker.alive(now):
            return (now - worker.seen_at).total_seconds()
    return None


def _left_behind(run: RunRecord, workers: Sequence[WorkerBeat], now: datetime) -> str | None:
    """When live workers run the workflow, but none at the run's version: a deploy left it
    behind, and only an upgrade (or a worker of its code) moves it on."""
    if run.version is None or runners(run, workers, now, any_queue=True):
        return None
    if not any(w.alive(now) and run.workflow in w.serves for w in workers):
        return None  # no worker runs the workflow at all: said where it matters
    return (
        f"no live worker runs workflow {run.workflow!r} at version {run.version}, the code it "
        "started on: move it to the deployed code, which first checks that the code replays "
        "its history (durably upgrade MODULE:ATTR)"
    )


def runners(
    run: RunRecord, workers: Sequence[WorkerBeat], now: datetime, *, any_queue: bool = False
) -> list[WorkerBeat]:
    """The live workers that can run `run`: they serve its workflow, at its version, and its
    queue (unless `any_queue`)."""
    queue = run.queue or DEFAULT_QUEUE
    live = [
        w
        for w in workers
        if w.alive(now)
        and run.workflow in w.serves
        and (any_queue or w.queues is None or queue in w.queues)
    ]
    if run.version is not None:
        live = [w for w in live if run.version in w.serves[run.workflow]]
    return live


def _last_event_of_step(events: Sequence[Event]) -> Event | None:
    for event in reversed(events):
        if event.position is not None and event.kind in _WAITS:
            return event
        if event.kind in _MOVES_ON:
            return None
    return None


_WAITS = frozenset(
    {
        EventKind.STEP_ATTEMPT_FAILED,
        EventKind.STEP_WAITING,
        EventKind.TIMER_SET,
        EventKind.SIGNAL_WAITING,
    }
)
# events after which the run is past its last wait
_MOVES_ON = frozenset(
    {
        EventKind.STEP_COMPLETED,
        EventKind.STEP_STARTED,
        EventKind.TIMER_FIRED,
        EventKind.SIGNAL_RECEIVED,
        EventKind.SIGNAL_TIMED_OUT,
        EventKind.STEP_SKIPPED,
        EventKind.RUN_RETRIED,
    }
)


def _last_failed(events: Sequence[Event]) -> StepRecord | None:
    failed = [record for record in fold_run(events).steps if record.error is not None]
    return failed[-1] if failed else None


def _message(record: StepRecord) -> str:
    return "" if record.error is None else _clip(record.error.message)


def _payload(event: Event) -> object:
    try:
        return payload_of(event)
    except PayloadError:
        return None


def _error(error: ErrorInfo) -> str:
    return f"{error.error_class}: {_clip(error.message)}"


def _short_class(name: str) -> str:
    return name.rpartition(".")[2]


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _id(run: RunRecord) -> str:
    """The run's id in a suggested command: quoted if a shell would split it, as a name is."""
    return shlex.quote(run.id)


def _clock(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")
