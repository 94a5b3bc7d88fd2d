"""Properties of history folding over generated histories (#22, fuzzing and bad input).

Any events at all, garbage data included, fold to a state that holds together or raise a
PayloadError (or, for a call the history does not record, a NonDeterminismError): never
another exception. Histories made the way the engine makes them (steps started, then
completed, failed or lost with their worker; reconciled; compensated; retried by a person)
fold to what a simple model of them says: a completed step replays its result, and the
undos owed are each completed or maybe-happened step once, latest first, never one undone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durably.core.control import CONTROL_KINDS, fold_control
from durably.core.event_data import PAYLOAD_CLASSES, encode_payload, step_started_data
from durably.core.history import UNREADABLE_ROW, ErrorInfo, Event, EventKind
from durably.core.payloads import (
    ApprovalRequested,
    AttemptFailed,
    Claimed,
    Compensating,
    CompensationAttemptFailed,
    CompensationFailed,
    CompensationStarted,
    MessageReceived,
    Payload,
    Result,
    RunFailed,
    RunParked,
    RunRetried,
    RunStarted,
    StepFailed,
    StepReconciled,
    StepStarted,
    WaitStarted,
)
from durably.core.replay import (
    Execute,
    Replay,
    StepRecord,
    check_known,
    fold_deaths,
    fold_run,
    fold_steps,
    next_action,
    next_wait,
    owed_undos,
    progressed,
)
from durably.core.status import RunStatus
from durably.errors import NonDeterminismError, PayloadError

AT = datetime(2026, 1, 1, tzinfo=UTC)
FUZZ = settings(max_examples=300, deadline=None)
STORIES = settings(max_examples=300, deadline=None)
CALLS = frozenset({"step", "timer", "signal", "value", "approval", "child"})
WAITING = ("waiting", "lost")  # open steps whose next attempt has not started


# -- any events -------------------------------------------------------------------------------

# Every key some payload reads, so that garbage objects often hold the right key, mistyped.
KEYS = sorted(
    {name for cls in PAYLOAD_CLASSES.values() if cls for name in cls.__dataclass_fields__}
    | {"error_class", "message", "correlation_id", "trace_parent", "id", "hash"}
)  # the payloads' fields, and the JSON keys named otherwise
# texts some field may expect: times, statuses, control kinds; and odd ones
ODD_TEXTS = ["", "x", "not a time", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00", "\x00"]
TEXTS = st.sampled_from([*ODD_TEXTS, *RunStatus, *sorted(CONTROL_KINDS)]) | st.text(max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXTS
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
    max_leaves=6,
)
GARBAGE_OBJECTS = st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=10)
MOMENTS = st.datetimes(timezones=st.sampled_from([UTC, None]))


def payloads_of(cls: type[Payload]) -> st.SearchStrategy[Payload]:
    """Well-formed payloads of `cls`, with hypothesis filling in the fields."""
    overrides: dict[str, Any] = {}
    if cls is StepStarted:
        overrides["input"] = st.dictionaries(TEXTS, JSON_VALUES, max_size=3)
    if cls is Result:
        overrides["text"] = JSON_VALUES.map(json.dumps)
    if cls is ApprovalRequested:
        overrides["remind_after"] = st.none() | st.floats(0, 1e6)
    if cls is MessageReceived:
        kinds = st.sampled_from(sorted(CONTROL_KINDS)) | TEXTS
        overrides["kind"] = kinds
        overrides["data"] = st.none() | TEXTS | TEXTS.map(json.dumps)
    return st.builds(
        cls,
        **overrides,
        **{
            name: MOMENTS
            for name in ("deadline", "retry_at", "until", "sent_at", "at")
            if name in cls.__dataclass_fields__ and name not in overrides
        },
    )


PAYLOADS = {cls: payloads_of(cls) for cls in PAYLOAD_CLASSES.values() if cls is not None}
ANY_PAYLOAD = st.one_of(list(PAYLOADS.values()))
GARBAGE = GARBAGE_OBJECTS.map(json.dumps) | JSON_VALUES.map(json.dumps) | st.text(max_size=20)


def data_for(kind: EventKind) -> st.SearchStrategy[str | None]:
    """The data of an event of `kind`: well-formed for it, well-formed for another kind,
    or garbage (mistyped fields, other JSON, text that is no JSON at all)."""
    own = PAYLOAD_CLASSES.get(kind)
    valid = ANY_PAYLOAD if own is None else st.one_of([PAYLOADS[own]] * 3 + [ANY_PAYLOAD])
    return st.none() | valid.map(encode_payload) | valid.map(encode_payload) | GARBAGE


# with the unknown ones: a kind a newer durably wrote, a row the store could not read
ALL_KINDS = [*EventKind, EventKind("from_a_newer_durably"), EventKind(UNREADABLE_ROW)]
KINDS = st.sampled_from(ALL_KINDS)
DATA = {kind: data_for(kind) for kind in ALL_KINDS}


POSITIONS = st.sampled_from([0, 0, 1, 1, 2, 3, None, -1, 7])  # few, to meet again
EVENT_NAMES = st.sampled_from(["charge", "charge", "reserve", "durably.sleep", "", None])
ATTEMPTS = st.none() | st.integers(-1, 4)
SEQS = st.none() | st.integers(0, 40)  # None: in order (the event's place)


@st.composite
def any_event(draw: st.DrawFn) -> Event:
    kind = draw(KINDS)
    return Event(
        seq=draw(SEQS) or 0,
        kind=kind,
        at=draw(st.just(AT) | MOMENTS),
        position=draw(POSITIONS),
        name=draw(EVENT_NAMES),
        attempt=draw(ATTEMPTS),
        data=draw(DATA[kind]),
    )


def in_order(events: list[Event]) -> list[Event]:
    """Events numbered by their place, but where a seq was drawn: then any seq, duplicates
    and disorder included."""
    return [replace(e, seq=e.seq or n) for n, e in enumerate(events, start=1)]


ANY_EVENTS = st.lists(any_event(), max_size=16).map(in_order)


def folded_or_refused(fold: Callable[[], Any]) -> Any:
    """What `fold` returns, or None if it refused the history with a PayloadError."""
    try:
        return fold()
    except PayloadError:
        return None


@FUZZ
@given(ANY_EVENTS)
def test_any_history_folds_or_is_refused_with_a_payload_error(events: list[Event]) -> None:
    unknown = any(not event.kind.known or event.kind == UNREADABLE_ROW for event in events)
    if unknown:
        with pytest.raises(PayloadError):
            check_known(events)
    else:
        check_known(events)

    steps = folded_or_refused(lambda: fold_steps(events))
    if steps is not None:
        check_records(steps)
        check_decisions(steps)
    phase = folded_or_refused(lambda: fold_run(events))
    if phase is not None:
        assert phase.steps == steps
        assert phase.final_status is None or phase.final_status in set(RunStatus)
        assert phase.deaths == fold_deaths(events)
        assert all(attempts >= 1 for attempts in phase.compensation_attempts.values())
        owed = [record.position for record in owed_undos(phase)]
        assert len(owed) == len(set(owed))
        assert owed_positions(phase.steps, phase.compensated) == set(owed)
    deaths = folded_or_refused(lambda: fold_deaths(events))
    if deaths is not None:
        assert deaths.count >= 0
        assert not deaths.last_alone or deaths.count > 0
    folded_or_refused(lambda: fold_control(events))
    assert isinstance(progressed(events), bool)


def check_records(steps: list[StepRecord]) -> None:
    """One record per position, in position order, each holding together."""
    positions = [record.position for record in steps]
    assert positions == sorted(set(positions))
    for record in steps:
        assert record.call in CALLS
        assert record.attempts >= 0
        assert record.settled == (record.completed or record.error is not None)


def check_decisions(steps: list[StepRecord]) -> None:
    """next_action and next_wait answer every call: replay, execute, or non-determinism."""
    for index, record in enumerate(steps):
        action = next_action(steps, index, record.name)
        if record.settled:
            assert isinstance(action, Replay)
            assert action.record is record
        else:
            assert isinstance(action, Execute)
            assert action.attempt == record.attempts + 1
        assert next_wait(steps, index, record.name) is record
        with pytest.raises(NonDeterminismError):
            next_action(steps, index, record.name + "-renamed")
        with pytest.raises(NonDeterminismError):
            next_wait(steps, index, record.name + "-renamed")
    fresh = next_action(steps, len(steps), "anything")
    assert isinstance(fresh, Execute)
    assert (fresh.position, fresh.attempt) == (len(steps), 1)
    assert next_wait(steps, len(steps), "anything") is None


def owed_positions(steps: list[StepRecord], compensated: frozenset[int]) -> set[int]:
    """The positions owed an undo, by the rule: a step that completed or may have happened
    (in flight, or an attempt that may have taken effect), not undone yet."""
    return {
        record.position
        for record in steps
        if record.call == "step"
        and (record.completed or record.in_flight or record.maybe_happened)
        and record.position not in compensated
    }


# -- data nested deeper than the JSON decoder goes (found by hand: a RecursionError escaped) ----


@pytest.mark.parametrize(
    "fold",
    [fold_steps, fold_run, fold_control, fold_deaths],
    ids=["fold_steps", "fold_run", "fold_control", "fold_deaths"],
)
def test_data_nested_too_deep_to_decode_is_a_payload_error(
    fold: Callable[[list[Event]], object],
) -> None:
    deep = "[" * 5000 + "]" * 5000
    events = [
        Event(1, EventKind.CLAIMED, AT, data='{"took_over_from": ' + deep + "}"),
        Event(2, EventKind.MESSAGE_RECEIVED, AT, data=deep),
        Event(3, EventKind.STEP_FAILED, AT, 0, "charge", 1, deep),
    ]
    with pytest.raises(PayloadError):
        fold(events)


# -- histories the engine's way ---------------------------------------------------------------


@dataclass
class Step:
    """The model of one step call: what happened to it, as the story tells it."""

    position: int
    name: str
    reconciles: bool  # the step has a reconcile hook
    attempts: int = 0
    state: str = "running"  # running, waiting (its retry), lost (with its worker), done, failed
    unknown: bool = False  # the next attempt reconciles first (the last one may have happened)
    maybe: bool = False  # an attempt may have taken effect, and nothing showed it did not
    held_reconcile: bool = False  # a reconcile found nothing; the event goes with the outcome
    started_seq: int = 0  # of the latest attempt
    result: str | None = None
    completed_seq: int | None = None
    undone: bool = False


@dataclass
class Expected:
    """What the history up to `length` events must fold to."""

    length: int
    results: dict[int, tuple[str, str]]  # position -> (name, result JSON)
    owed: list[int]  # positions owed an undo, in the order they are undone
    ordered: bool  # `owed` is the exact order (else: only its completed steps are in order)
    # open steps waiting for their next attempt -> (name, whether it reconciles first)
    unknown: dict[int, tuple[str, bool]]
    compensating: str | None  # the status the run ends in once compensated


@dataclass
class Story:
    """Writes a history the way the engine does, one commit at a time, and says after each
    commit what it must fold to. `parallel`: how many steps may run at once (durably.gather);
    1 is a plain workflow, whose steps complete in position order."""

    draw: st.DrawFn
    parallel: int
    events: list[Event] = field(default_factory=list)
    steps: dict[int, Step] = field(default_factory=dict)
    timers: set[int] = field(default_factory=set)
    expected: list[Expected] = field(default_factory=list)
    compensating: str | None = None
    epoch: int = 1

    # -- writing --------------------------------------------------------------------------

    def emit(
        self,
        kind: EventKind,
        step: Step | None = None,
        data: str | None = None,
        *,
        position: int | None = None,
        name: str | None = None,
        attempt: int | None = None,
    ) -> Event:
        if step is not None:
            position, name = step.position, step.name
            attempt = step.attempts if attempt is None else attempt
        event = Event(len(self.events) + 1, kind, AT, position, name, attempt, data)
        self.events.append(event)
        return event

    def commit(self, *, ordered: bool = True) -> None:
        """`ordered` False: check the order of the completed steps' undos only."""
        results: dict[int, tuple[str, str]] = {}
        for step in self.steps.values():
            if step.state == "done" and step.result is not None:
                results[step.position] = (step.name, step.result)
        owed = [
            s
            for s in self.steps.values()
            if (s.state == "done" or s.maybe or s.state == "running") and not s.undone
        ]
        self.expected.append(
            Expected(
                len(self.events),
                results,
                [s.position for s in sorted(owed, key=self.undo_order, reverse=True)],
                ordered and self.parallel == 1,
                {
                    s.position: (s.name, s.unknown)
                    for s in self.steps.values()
                    if s.state in WAITING
                },
                self.compensating,
            )
        )

    def undo_order(self, step: Step) -> int:
        """Latest completed first; a step that may have happened counts from its start. With
        one step at a time this is position order; with several, only completions order."""
        if self.parallel == 1:
            return step.position
        return step.completed_seq if step.completed_seq is not None else step.started_seq

    def choose(self, *options: str) -> str:
        return self.draw(st.sampled_from(options))

    # -- the run ---------------------------------------------------------------------------

    def tell(self, *, retries: bool = True) -> None:
        self.emit(EventKind.RUN_STARTED)
        self.claim(None)
        self.commit()
        for _ in range(self.draw(st.integers(0, 24))):
            if not self.forward(retries=retries):
                break
        else:
            if self.draw(st.booleans()):
                return  # the history ends here: a run in flight
            if self.open_steps() or self.failed_steps():
                self.cut_off()
                self.compensate(RunStatus.CANCELLED)
            else:
                self.emit(EventKind.RUN_COMPLETED)
                self.commit()
            return
        self.compensate(RunStatus(self.choose("failed", "cancelled", "timed_out")))

    def forward(self, *, retries: bool) -> bool:
        """One commit of a running workflow; False when the run begins to be undone."""
        open_steps = self.open_steps()
        moves = ["start"] * 3 if len(open_steps) < self.parallel else []
        if self.parallel == 1 and not open_steps:
            moves.append("timer")
        if open_steps:
            moves += ["outcome"] * 4 + ["crash"]
        moves.append("cancel")
        move = self.choose(*moves)
        if move == "start":
            self.start(len(self.steps) + len(self.timers))
        elif move == "timer":
            position = len(self.steps) + len(self.timers)
            self.timers.add(position)
            until = encode_payload(WaitStarted(AT))
            self.emit(EventKind.TIMER_SET, None, until, position=position, name="durably.sleep")
            self.emit(EventKind.TIMER_FIRED, position=position, name="durably.sleep")
        elif move == "outcome":
            step = self.draw(st.sampled_from(open_steps))
            if step.state in ("waiting", "lost"):
                self.attempt(step)
            elif not self.outcome(step, retries=retries):
                return False
        elif move == "crash":
            self.crash()
        else:
            self.cut_off()
            return False
        self.commit()
        return True

    def open_steps(self) -> list[Step]:
        return [s for s in self.steps.values() if s.state in ("running", "waiting", "lost")]

    def failed_steps(self) -> list[Step]:
        return [s for s in self.steps.values() if s.state == "failed"]

    def claim(self, took_over_from: str | None) -> None:
        data = encode_payload(Claimed(f"w{self.epoch}", self.epoch, took_over_from))
        self.emit(EventKind.CLAIMED, data=data)
        self.epoch += 1

    def start(self, position: int) -> None:
        name = f"step{position}"
        step = Step(position, name, reconciles=self.draw(st.booleans()))
        self.steps[position] = step
        self.attempt(step)

    def attempt(self, step: Step) -> None:
        """A new attempt: step_started (committed before the body), then, if an earlier
        attempt may have happened and the step has a reconcile hook, the hook."""
        step.attempts += 1
        key = f"run-1:{step.position}:{step.name}"
        data = step_started_data(key, '{"args": [], "kwargs": {}}', undo=True)
        step.started_seq = self.emit(EventKind.STEP_STARTED, step, data).seq
        step.state = "running"
        if not (step.unknown and step.reconciles):
            return
        self.commit()  # the start is committed before the hook runs
        if self.draw(st.booleans()):  # found: its result is recorded as the step's
            self.emit(EventKind.STEP_RECONCILED, step, encode_payload(StepReconciled(True)))
            self.complete(step)
        elif self.draw(st.booleans()):  # found nothing: the body runs; the event goes with
            step.held_reconcile = True  # its outcome, or ahead of it (a heartbeat's commit)
        else:
            self.emit(EventKind.STEP_RECONCILED, step, encode_payload(StepReconciled(False)))
            step.maybe = False  # no earlier attempt happened; this one is in flight
            self.commit()

    def outcome(self, step: Step, *, retries: bool) -> bool:
        """The running attempt's outcome, committed; False if the step failed for good."""
        if step.held_reconcile:
            self.emit(EventKind.STEP_RECONCILED, step, encode_payload(StepReconciled(False)))
            step.held_reconcile, step.maybe = False, False  # no earlier attempt happened
        how = self.choose(*["completed"] * 5, "retry", "retry", "failed", "escalated")
        if how == "completed":
            self.complete(step)
            return True
        # timed out: it may have happened all the same (an escalation is raised by the body)
        unknown = how != "escalated" and self.draw(st.booleans())
        error = ErrorInfo("ConnectionError", "reset by peer")
        step.maybe = step.maybe or unknown
        if how == "retry":
            data = encode_payload(AttemptFailed(error, AT, unknown))
            self.emit(EventKind.STEP_ATTEMPT_FAILED, step, data)
            step.state, step.unknown = "waiting", unknown
            return True
        failed = StepFailed(error, "attempts exhausted", step.attempts, unknown)
        self.emit(EventKind.STEP_FAILED, step, encode_payload(failed))
        step.state, step.unknown = "failed", False
        if how == "escalated" and retries and self.may_retry_from(step):
            self.park_and_retry(step)
            return True
        self.cut_off()
        return False

    def complete(self, step: Step) -> None:
        result = json.dumps(f"result of {step.name} #{step.attempts}")
        event = self.emit(EventKind.STEP_COMPLETED, step, result)
        step.state, step.unknown, step.maybe = "done", False, False
        step.result, step.completed_seq = result, event.seq

    def crash(self) -> None:
        """The worker dies; another takes the run over and records the lost attempts."""
        self.claim("the-dead-worker")
        for step in self.steps.values():
            if step.state == "running":
                self.emit(EventKind.ATTEMPT_LOST, step)
                step.state, step.unknown, step.maybe, step.held_reconcile = (
                    "lost",
                    True,
                    True,
                    False,
                )

    def cut_off(self) -> None:
        """The run stops (a step failed, a cancel, the deadline): a body in flight is
        cancelled and recorded as failed, having perhaps taken effect."""
        for step in self.steps.values():
            if step.state == "running":
                if step.held_reconcile:  # committed with the cut-off body's failure
                    found = encode_payload(StepReconciled(False))
                    self.emit(EventKind.STEP_RECONCILED, step, found)
                    step.held_reconcile = False
                failed = StepFailed(
                    ErrorInfo("durably.errors.RunCancelled", "x"),
                    "cancelled",
                    step.attempts,
                    unknown=True,
                )
                self.emit(EventKind.STEP_FAILED, step, encode_payload(failed))
                step.state, step.maybe = "failed", True

    def may_retry_from(self, step: Step) -> bool:
        """Here a person retries from a failed step only when it is the last step and no
        other runs (a retry reopens every step from there on)."""
        others = [s for s in self.steps.values() if s is not step]
        return all(s.position < step.position and s.state == "done" for s in others)

    def park_and_retry(self, step: Step) -> None:
        """The run is parked (an escalation); a person retries it from the failed step, which
        runs again with fresh attempts (every step from there on does). If an earlier attempt
        may have happened, it still may: the next attempt reconciles first."""
        self.cut_off()
        parked = RunParked(ErrorInfo("durably.errors.Escalated", "look"), "escalated")
        self.emit(EventKind.RUN_PARKED, data=encode_payload(parked))
        self.commit()
        data = encode_payload(RunRetried("ops", step.position))
        self.emit(EventKind.RUN_RETRIED, data=data, position=step.position)
        for position in [p for p in self.steps if p >= step.position]:
            del self.steps[position]
        self.timers = {p for p in self.timers if p < step.position}
        again = Step(
            step.position,
            step.name,
            step.reconciles,
            state="waiting",
            unknown=step.maybe,
            maybe=step.maybe,
        )
        self.steps[step.position] = again
        # handed back to the workers, retried; the order of its undo is not checked until
        # its next attempt starts (test_a_retried_step_that_may_have_happened_is_undone_in_order)
        self.commit(ordered=False)
        self.claim(None)
        self.attempt(again)

    # -- undoing ---------------------------------------------------------------------------

    def compensate(self, then: RunStatus) -> None:
        error = ErrorInfo("durably.errors.RunCancelled", "stop")
        self.emit(EventKind.COMPENSATING, data=encode_payload(Compensating(error, then)))
        self.compensating = str(then)
        self.commit()
        for _ in range(16):
            owed = self.expected[-1].owed
            if not owed:
                break
            if not self.undo(self.steps[owed[0]]):
                return  # the history ends with the run's worker dead, or parked
        else:
            return  # still undoing
        end = RunFailed(error)
        kind = EventKind.RUN_CANCELLED if then is RunStatus.CANCELLED else EventKind.RUN_FAILED
        self.emit(kind, data=encode_payload(end))
        self.commit()

    def undo(self, step: Step) -> bool:
        """One attempt at the undo of `step`; False if the history ends there."""
        attempt = 1 + sum(
            1
            for e in self.events[self.last_retry() :]
            if e.kind is EventKind.COMPENSATION_STARTED and e.position == step.position
        )
        key = encode_payload(CompensationStarted(f"run-1:{step.position}:{step.name}:undo"))
        self.emit(EventKind.COMPENSATION_STARTED, step, key, attempt=attempt)
        self.commit()
        how = self.choose("undone", "undone", "undone", "retry", "failed", "crash")
        if how == "crash":
            if self.draw(st.booleans()):
                return False
            self.claim("the-dead-worker")
            self.commit()
            return True
        error = ErrorInfo("ConnectionError", "reset by peer")
        if how == "retry":
            data = encode_payload(CompensationAttemptFailed(error, AT))
            self.emit(EventKind.COMPENSATION_ATTEMPT_FAILED, step, data, attempt=attempt)
            self.commit()
            return True
        if how == "failed":
            data = encode_payload(CompensationFailed(error, "attempts exhausted", attempt))
            self.emit(EventKind.COMPENSATION_FAILED, step, data, attempt=attempt)
            parked = RunParked(error, "compensation failed")
            self.emit(EventKind.RUN_PARKED, data=encode_payload(parked))
            self.commit()
            if self.draw(st.booleans()):
                return False  # it waits for a person
            self.emit(EventKind.RUN_RETRIED, data=encode_payload(RunRetried("ops", None)))
            self.claim(None)
            self.commit()
            return True
        if step.state != "done":  # its outcome is unknown: its reconcile hook first, if any
            hook = self.choose("none", "found nothing", "found") if step.reconciles else "none"
            if hook != "none":
                found = encode_payload(StepReconciled(hook == "found"))
                self.emit(EventKind.STEP_RECONCILED, step, found, attempt=step.attempts)
            if hook == "found":
                self.complete(step)
            elif hook == "found nothing":  # no attempt happened
                step.unknown, step.maybe = False, False
        self.emit(EventKind.COMPENSATION_COMPLETED, step, attempt=attempt)
        step.undone = True
        self.commit()
        return True

    def last_retry(self) -> int:
        retried = [i for i, e in enumerate(self.events) if e.kind is EventKind.RUN_RETRIED]
        return retried[-1] if retried else 0


@st.composite
def stories(draw: st.DrawFn) -> Story:
    story = Story(draw, parallel=draw(st.sampled_from([1, 1, 2, 3])))
    story.tell()
    return story


def prefixes(story: Story) -> Iterator[tuple[list[Event], Expected]]:
    for expected in story.expected:
        yield story.events[: expected.length], expected


@STORIES
@given(stories())
def test_a_completed_step_is_settled_and_replays_its_result(story: Story) -> None:
    for events, expected in prefixes(story):
        steps = fold_steps(events)
        by_position = {record.position: record for record in steps}
        for position, (name, result) in expected.results.items():
            record = by_position[position]
            assert record.completed
            assert record.settled
            assert record.error is None
            assert not record.in_flight
            assert record.result == result
            action = next_action(steps, position, name)
            assert isinstance(action, Replay)
            assert action.record.result == result


@STORIES
@given(stories())
def test_undos_are_owed_for_completed_and_maybe_happened_steps_latest_first(
    story: Story,
) -> None:
    for events, expected in prefixes(story):
        phase = fold_run(events)
        owed = [record.position for record in owed_undos(phase)]
        assert len(owed) == len(set(owed)), "a step is owed its undo twice"
        assert not set(owed) & phase.compensated, "a step undone already is owed again"
        assert all(p not in story.timers for p in owed), "a timer is owed an undo"
        if expected.ordered:
            assert owed == expected.owed
        else:
            assert sorted(owed) == sorted(expected.owed)
            completed = [p for p in owed if p in expected.results]
            assert completed == [p for p in expected.owed if p in expected.results]
        assert phase.final_status == expected.compensating


@STORIES
@given(stories())
def test_the_next_call_of_a_step_not_settled_is_a_new_attempt(story: Story) -> None:
    """What the worker does next with each step: a settled one replays, an open one runs
    its next attempt, which reconciles first exactly when an earlier one may have happened."""
    for events, expected in prefixes(story):
        steps = fold_steps(events)
        for record in steps:
            action = next_action(steps, record.position, record.name)
            if record.settled:
                assert isinstance(action, Replay)
            else:
                assert isinstance(action, Execute)
                assert action.attempt == record.attempts + 1
        for position, (name, unknown) in expected.unknown.items():
            action = next_action(steps, position, name)
            assert isinstance(action, Execute)
            assert action.unknown == unknown


# -- what the properties found, fixed since (#22): the minimal examples -----------------------


def started(seq: int, attempt: int) -> Event:
    data = step_started_data("run-1:0:step0", '{"args": [], "kwargs": {}}', undo=True)
    return Event(seq, EventKind.STEP_STARTED, AT, 0, "step0", attempt, data)


def takeover(seq: int) -> Event:
    data = encode_payload(Claimed("w2", 2, "the-dead-worker"))
    return Event(seq, EventKind.CLAIMED, AT, data=data)


def beginning() -> list[Event]:
    claimed = encode_payload(Claimed("w1", 1))
    run_started = encode_payload(RunStarted())
    return [
        Event(1, EventKind.RUN_STARTED, AT, data=run_started),
        Event(2, EventKind.CLAIMED, AT, data=claimed),
    ]


def test_a_body_that_ran_after_its_reconcile_found_nothing_may_have_happened() -> None:
    """After a reconcile that found nothing, the body runs under the same attempt: once that
    event is committed ahead of the outcome (a heartbeat's commit) and the worker dies, the
    attempt is still in flight: the next one reconciles first, and an undo is owed."""
    events = [
        *beginning(),
        started(3, 1),
        takeover(4),
        Event(5, EventKind.ATTEMPT_LOST, AT, 0, "step0", 1),
        started(6, 2),
        Event(
            7, EventKind.STEP_RECONCILED, AT, 0, "step0", 2, encode_payload(StepReconciled(False))
        ),
        Event(8, EventKind.STEP_HEARTBEAT, AT, 0, "step0", 2, '"half way"'),  # flushed with it
        takeover(9),  # the worker died in the body of attempt 2
    ]
    [record] = fold_steps(events)
    assert record.in_flight  # attempt 3 must reconcile first
    error = ErrorInfo("durably.errors.RunCancelled", "stop")
    cancelled = encode_payload(Compensating(error, RunStatus.CANCELLED))
    phase = fold_run([*events, Event(10, EventKind.COMPENSATING, AT, data=cancelled)])
    assert [owed.position for owed in owed_undos(phase)] == [0]


def test_a_manual_retry_keeps_an_earlier_attempts_undo_owed() -> None:
    """A person retries a parked run from a step whose earlier attempt was lost with its
    worker: that attempt may still have happened (the next reconciles first, and if the run
    is undone, so is the step)."""
    escalated = StepFailed(ErrorInfo("durably.errors.Escalated", "look"), "escalated", 2)
    parked = RunParked(ErrorInfo("durably.errors.Escalated", "look"), "escalated")
    error = ErrorInfo("durably.errors.RunCancelled", "stop")
    events = [
        *beginning(),
        started(3, 1),
        takeover(4),  # attempt 1 was lost with its worker: it may have happened
        Event(5, EventKind.ATTEMPT_LOST, AT, 0, "step0", 1),
        started(6, 2),
        Event(7, EventKind.STEP_FAILED, AT, 0, "step0", 2, encode_payload(escalated)),
        Event(8, EventKind.RUN_PARKED, AT, data=encode_payload(parked)),
        Event(9, EventKind.RUN_RETRIED, AT, 0, data=encode_payload(RunRetried("ops", 0))),
        # the person then cancels it before a worker takes it up
        Event(
            10,
            EventKind.COMPENSATING,
            AT,
            data=encode_payload(Compensating(error, RunStatus.CANCELLED)),
        ),
    ]
    retried = next_action(fold_steps(events[:-1]), 0, "step0")
    assert isinstance(retried, Execute)
    assert (retried.attempt, retried.unknown) == (1, True)
    assert [owed.position for owed in owed_undos(fold_run(events))] == [0]


def test_a_retried_step_that_may_have_happened_is_undone_in_order() -> None:
    """Step 0 completed; step 1's attempt was lost with its worker, and its next escalated;
    a person retries the parked run from step 1, then cancels it before a worker takes it
    up: step 1 is undone first, then step 0."""
    escalated = StepFailed(ErrorInfo("durably.errors.Escalated", "look"), "escalated", 2)
    parked = RunParked(ErrorInfo("durably.errors.Escalated", "look"), "escalated")
    cancelled = Compensating(ErrorInfo("durably.errors.RunCancelled", "stop"), RunStatus.CANCELLED)
    step1 = step_started_data("run-1:1:step1", '{"args": [], "kwargs": {}}', undo=True)
    events = [
        *beginning(),
        started(3, 1),
        Event(4, EventKind.STEP_COMPLETED, AT, 0, "step0", 1, '"held"'),
        Event(5, EventKind.STEP_STARTED, AT, 1, "step1", 1, step1),
        takeover(6),  # attempt 1 of step 1 was lost with its worker: it may have happened
        Event(7, EventKind.ATTEMPT_LOST, AT, 1, "step1", 1),
        Event(8, EventKind.STEP_STARTED, AT, 1, "step1", 2, step1),
        Event(9, EventKind.STEP_FAILED, AT, 1, "step1", 2, encode_payload(escalated)),
        Event(10, EventKind.RUN_PARKED, AT, data=encode_payload(parked)),
        Event(11, EventKind.RUN_RETRIED, AT, 1, data=encode_payload(RunRetried("ops", 1))),
        Event(12, EventKind.COMPENSATING, AT, data=encode_payload(cancelled)),
    ]
    assert [owed.position for owed in owed_undos(fold_run(events))] == [1, 0]
