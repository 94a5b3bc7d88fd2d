"""Starting runs: the run a start creates (its input checked against its workflow, its
priority, its correlation), and starts that share a commit: threads calling `start` at once
create their runs in one transaction, the way a worker's checkpoints share one
(runtime/committer.py).

Leader and followers, without a thread of its own: a caller that finds nobody committing
commits what is queued, its own run first; callers that come meanwhile queue and wait, and
when the commit is done the first of them leads the next one. A lone caller commits at once
on its own thread, so it pays no hand-off.

A start that a worker of the same process would claim at once (it serves the run, has a free
slot and no backlog) is created already claimed by that worker, in the start's own commit,
and handed to it (Takers): the run pays no wake-up, no claim and one commit fewer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict

from durably.client.correlation import correlation_of, trace_parent
from durably.client.ids import new_run_id
from durably.codec.encoding import encode_call
from durably.core.attributes import check_attributes
from durably.core.debounce import debounce_of
from durably.core.event_data import encode_payload
from durably.core.names import check_run_id
from durably.core.payloads import RunStarted
from durably.core.priority import DEFAULT_PRIORITY, check_priority
from durably.core.queues import check_key
from durably.durations import Duration, parse_duration
from durably.errors import ConfigError, RunConflict
from durably.runtime.handoffs import Taker
from durably.stores import Claim, NewRun, RunRecord
from durably.workflow.definitions import Step, Workflow

__all__ = [
    "Definitions",
    "Start",
    "StartOptions",
    "Started",
    "Starter",
    "Takers",
    "check_same_start",
    "new_run",
    "workflow_of",
]


class Definitions(Protocol):
    """What the client needs of an app (an App has both): its workflows and steps."""

    def workflow_named(self, name: str) -> Workflow: ...

    def step_named(self, name: str) -> Step | None: ...

    def queue_of(self, name: str | None, workflow: Workflow) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Start:
    """One run of a batch for `start_many`: what `start` takes."""

    workflow: Workflow | str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] | None = None
    id: str | None = None
    priority: int | None = None  # None: the workflow's
    correlation_id: str | None = None  # None: the caller's trace id, if it has one
    queue: str | None = None  # None: the workflow's (durably.core.queues)
    key: str | None = None  # whose run: its queue's per-key limits and fairness
    delay: Duration | None = None  # due this long after the start, not at once
    start_at: datetime | None = None  # due at this time (timezone-aware), not at once
    attributes: Mapping[str, str] | None = None  # to find it by (durably.core.attributes)
    # Starts of the workflow with this key coalesce into one run, due once they stop for this
    # long, and at the latest max_wait after the first (durably.core.debounce).
    debounce: Duration | None = None
    debounce_key: str | None = None
    max_wait: Duration | None = None


class StartOptions(TypedDict, total=False):
    """What a start says besides its workflow and arguments: the fields of `Start` after
    them, as keywords (Client.start says what each does)."""

    id: str | None
    priority: int | None
    correlation_id: str | None
    queue: str | None
    key: str | None
    delay: Duration | None
    start_at: datetime | None
    attributes: Mapping[str, str] | None
    debounce: Duration | None
    debounce_key: str | None
    max_wait: Duration | None


@dataclass(frozen=True, slots=True)
class Started:
    run: RunRecord
    # False: a run with this id existed already, same workflow and input; or, for a debounced
    # start, it joined the run its key gathers starts in
    created: bool


Created = tuple[RunRecord, bool]


class _Queued:
    __slots__ = ("done", "error", "leads", "outcome", "run")

    def __init__(self, run: NewRun) -> None:
        self.run = run
        # Set when `outcome` or `error` is in, or it leads; a leader needs none (it costs a
        # few microseconds, which a lone caller would pay on every start).
        self.done: threading.Event | None = None
        self.leads = False
        self.outcome: Created | None = None
        self.error: BaseException | None = None


class Starter:
    """`create(run)`: alone, through `create_one` (the store's `create_run`); with others
    queued, through `create_runs` (the store's, one transaction for the batch)."""

    def __init__(
        self,
        create_runs: Callable[[Sequence[NewRun]], list[Created]],
        create_one: Callable[[NewRun], Created],
    ) -> None:
        self._create_runs = create_runs
        self._create_one = create_one
        self._lock = threading.Lock()
        self._queue: list[_Queued] = []
        self._leading = False

    def create(self, run: NewRun) -> Created:
        """Create the run (or find it, as `Store.create_run`), maybe in a shared commit."""
        mine = _Queued(run)
        with self._lock:
            self._queue.append(mine)
            leads = not self._leading
            self._leading = True
            if not leads:
                mine.done = threading.Event()
        if mine.done is not None:
            mine.done.wait()
            leads = mine.leads
        if leads:
            self._lead()
        if mine.error is not None:
            raise mine.error
        assert mine.outcome is not None
        return mine.outcome

    def _lead(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        try:
            if len(batch) == 1:  # the usual case: the store's one-run call, as without us
                outcomes = [self._create_one(batch[0].run)]
            else:
                outcomes = self._create_runs([queued.run for queued in batch])
        except BaseException as exc:  # the commit failed for everyone in it
            for queued in batch:
                queued.error = exc
        else:
            for queued, outcome in zip(batch, outcomes, strict=True):
                queued.outcome = outcome
        finally:
            with self._lock:
                if self._queue:  # came while we committed: the first of them leads next
                    self._queue[0].leads = True
                    assert self._queue[0].done is not None
                    self._queue[0].done.set()
                else:
                    self._leading = False
            for queued in batch:
                if queued.done is not None:
                    queued.done.set()


ClaimedStart = Callable[[NewRun, str, timedelta], "tuple[RunRecord, Claim] | None"]


class Takers:
    """The workers of this process that take runs at their start, and the start that hands
    one over: created claimed for the worker (`create_claimed(run, owner, lease)`, the
    store's), in one commit."""

    def __init__(self, create_claimed: ClaimedStart) -> None:
        self._create_claimed = create_claimed
        self._takers: list[Taker] = []
        self._lock = threading.Lock()

    def offer(self, taker: Taker) -> Callable[[], None]:
        """Let `taker` take the starts it can run at once; returns the withdrawal."""
        with self._lock:
            self._takers = [*self._takers, taker]

        def withdraw() -> None:
            with self._lock:
                self._takers = [other for other in self._takers if other is not taker]

        return withdraw

    def create(self, run: NewRun) -> RunRecord | None:
        """Create `run` claimed for a worker here that takes it, and hand it over; None if
        none takes it (due later, debounced, or no worker has room) or its id is taken:
        nothing is then written, and the start goes the usual way."""
        # Replaced, never changed: read without the lock. Each taker says what it takes.
        taker = next((taker for taker in self._takers if taker.reserve(run)), None)
        if taker is None:
            return None
        try:
            made = self._create_claimed(run, taker.name, taker.lease)
        except BaseException:
            taker.hand(None)
            raise
        taker.hand(None if made is None else made[1])
        return None if made is None else made[0]


def check_same_start(record: RunRecord, workflow: str, payload: str) -> None:
    """A start that found its id taken: RunConflict unless it is the same start again."""
    same_input = record.input == payload or json.loads(record.input) == json.loads(payload)
    if record.workflow != workflow or not same_input:
        what = "workflow" if record.workflow != workflow else "input"
        raise RunConflict(
            f"a run with id {record.id!r} already exists with a different {what} "
            f"(workflow {record.workflow!r}, input {record.input}); starting it again with "
            f"workflow {workflow!r} and input {payload} would create a second run. Use another "
            "id, or app.handle(id) to follow the existing run."
        )


def workflow_of(registry: Definitions | None, workflow: Workflow | str) -> Workflow:
    """The app's definition of `workflow`; ConfigError without the app."""
    if registry is None:
        raise ConfigError(
            "starting a run needs the app that defines its workflow, to check the input "
            "against its parameters: give the client the app's registry (the CLI: "
            "--app module:attribute)"
        )
    return registry.workflow_named(workflow if isinstance(workflow, str) else workflow.name)


def new_run(
    item: Start, registry: Definitions | None, *, max_payload: int | None, now: datetime
) -> NewRun:
    """The run to create: the input checked and encoded for its workflow, its priority, its
    queue and key, when it is due (debounced: its key, and when it is due at the latest),
    and its attributes."""
    delayed = item.delay is not None or item.start_at is not None
    debounce = debounce_of(
        item.debounce, item.debounce_key, item.max_wait, id=item.id, delayed=delayed
    )
    definition = workflow_of(registry, item.workflow)
    what = f"workflow {definition.name!r}"
    args, kwargs, limit = item.args, item.kwargs or {}, max_payload
    payload = encode_call(args, kwargs, definition.fn, what=what, limit=limit)
    priority = item.priority if item.priority is not None else definition.priority
    priority = DEFAULT_PRIORITY if priority is None else check_priority(priority)
    correlation, trace = correlation_of(item.correlation_id), trace_parent()
    started = RunStarted(correlation_id=correlation, trace_parent=trace)
    data = None if started == RunStarted() else encode_payload(started)
    if debounce is None:
        due, due_by = due_time(item.delay, item.start_at, now=now), None
    elif item.attributes:
        raise ConfigError(
            "a debounced start cannot carry attributes: the run it joins keeps its own. "
            "Start it without attributes, or without debounce"
        )
    else:
        due, due_by = debounce.due(now), debounce.due_by(now)
    assert registry is not None  # workflow_of refused a start without it
    return NewRun(
        new_run_id() if item.id is None else check_run_id(item.id),
        definition.name,
        payload,
        priority=priority,
        version=definition.version,
        correlation_id=correlation,
        started=data,
        queue=registry.queue_of(item.queue, definition),
        key=None if item.key is None else check_key(item.key),
        due=due,
        debounce=None if debounce is None else debounce.key,
        due_by=due_by,
        attributes={} if item.attributes is None else check_attributes(item.attributes),
    )


def due_time(
    delay: Duration | None, start_at: datetime | None, *, now: datetime
) -> datetime | None:
    """When a start's run is first due: `start_at`, or `delay` after `now`; None: at once."""
    if delay is not None and start_at is not None:
        raise ConfigError("give a start delay= or start_at=, not both")
    if start_at is not None:
        if not isinstance(start_at, datetime) or start_at.tzinfo is None:
            raise ConfigError(
                f"start_at must be a timezone-aware datetime (e.g. datetime.now(UTC) + ...), "
                f"not {start_at!r}: a naive one could mean any time zone"
            )
        return start_at if start_at > now else None
    if delay is None:
        return None
    wait = parse_duration(delay, what="delay")
    return now + wait if wait > timedelta(0) else None
