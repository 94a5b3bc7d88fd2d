"""One client for every caller: App, the CLI and the HTTP API start runs, read them and act on
them through it, so that validation, wake-ups and the audit trail happen in one place.

A client is a store plus what it needs to know of the app: its workflows and steps (whose
type hints check inputs and a skipped step's result) and its clock. Without the app it can
still read runs and act on them; only starting a run needs it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Unpack

from durably.client import approvals, control, dead_letters, messages, restarts
from durably.client.bulk import Bulk
from durably.client.control import Steered
from durably.client.messages import Delivered
from durably.client.reader import RunReader
from durably.client.starts import (
    Definitions,
    Start,
    Started,
    Starter,
    StartOptions,
    Takers,
    check_same_start,
    new_run,
    workflow_of,
)
from durably.client.webhooks import Webhooks
from durably.clock import Clock
from durably.codec.encoding import (
    decode_given,
    decode_given_call,
    encode,
)
from durably.codec.parameters import NO_HINT
from durably.core.approvals import ESCALATION
from durably.core.audit import Action, Via, audit_of
from durably.core.names import check_name
from durably.core.payloads import Decision
from durably.core.signals import SIGNAL_KIND
from durably.errors import (
    DurablyError,
    RunConflict,
)
from durably.runtime.handoffs import Taker
from durably.stores import NewRun, RunRecord, Store
from durably.workflow.definitions import Workflow

__all__ = ["Client", "Released"]

_SKIPPED = "the result given for the skipped step"


@dataclass(frozen=True, slots=True)
class Released:
    """What `Client.release` did: the dead worker named and how many leases of its ended."""

    worker: str
    count: int


class Client(RunReader):
    """Start runs, read them (RunReader), and act on them, on one store.

    `store` is a Store, or a call that returns one (App's: it opens the store on first use
    and reopens it after close). `registry` knows the app's workflows and steps; `clock`
    stamps what the client writes (default: the system's). `by` names who acts in the
    audit trail of every action whose own `by=` names nobody (an App's client: "app");
    `via` says how they reach durably (the library, the CLI, the API, the dashboard)."""

    def __init__(
        self,
        store: Store | Callable[[], Store],
        *,
        registry: Definitions | None = None,
        clock: Clock | None = None,
        max_payload: int | None = None,
        by: str = "app",
        via: Via = Via.LIBRARY,
    ) -> None:
        super().__init__(store, registry=registry, clock=clock)
        self.by = by  # who acts, in the audit trail, when an action names nobody (`by=`)
        self.via = via  # how they reach durably, in the audit trail
        self.max_payload = max_payload  # bytes an input or a message may take as JSON
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()
        # Concurrent starts share a commit; a lone one goes straight to create_run.
        self._starter = Starter(
            lambda runs: self.store.create_runs(runs, now=self.clock.now()),
            lambda run: self.store.create_run(run, now=self.clock.now()),
        )
        # Local workers that take a start at once, claimed in its own commit.
        self._takers = Takers(
            lambda run, owner, lease: self.store.create_claimed(
                run, owner, now=self.clock.now(), lease=lease
            )
        )

    def through(self, via: Via) -> Client:
        """This client as reached through `via` (the server's API and dashboard share their
        app's client): the same store, app, clock and local workers."""
        reached = copy.copy(self)
        reached.via = via
        return reached

    # -- starting -----------------------------------------------------------------------

    def start(
        self,
        workflow: Workflow | str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        by: str | None = None,
        **options: Unpack[StartOptions],
    ) -> Started:
        """Start a run (with a random id if none is given), or find the run with this `id`.

        The arguments are checked against the workflow's parameters: PayloadError if they do
        not fit or would not read back unchanged. RunConflict if the id is taken by a run of
        another workflow or with another input. `by`: the person who starts it, recorded in
        the audit trail (a start through the CLI, the API or the dashboard is recorded as its
        caller's; the app's own starts are its work, not a person's action, and are not).

        `options` (durably.client.starts.StartOptions):
        - `id`; `priority`: 0 to 1,000 (default: the workflow's, else 0); a start that finds
          its run keeps the run's priority.
        - `correlation_id`: recorded with the run (and its children), shown everywhere and
          searched by; default: the caller's OpenTelemetry trace id, if it has one.
        - `queue`: the queue the run goes on (default: the workflow's, else the default
          queue); `key`: whose run it is (a customer, a tenant), for its queue's per-key
          limits and fairness, and to find it by (durably.core.queues).
        - `delay` or `start_at`: the run is due that long after now, or at that time, not at
          once; it waits as a pending run, costing nothing, and shows its due time.
        - `attributes`: strings to find the run by (`runs(attributes=)`), stored in the
          clear: PayloadError for a secret-looking name (durably.core.attributes). A start
          that finds its run keeps the run's own.
        - `debounce`, `debounce_key`, `max_wait`: the starts of the workflow with this key
          make one run, due once none came for `debounce` (at the latest `max_wait` after the
          first), with the last one's input; `created` is False for those that joined it
          (durably.core.debounce)."""
        return self.start_one(Start(workflow, args, kwargs, **options), by=by)

    def start_one(self, start: Start, *, by: str | None = None) -> Started:
        """`start`, for a start written as a `Start` (what `start_many` takes a batch of)."""
        return self._create(self._run_of(start, by))

    def start_many(self, starts: Sequence[Start]) -> list[Started]:
        """`start` for each, in one transaction; the answers in order.

        Every input is checked before anything is written (PayloadError: nothing started).
        RunConflict if an id is taken by a run of another workflow or with another input:
        the other runs of the batch are started all the same (starting them again is safe)."""
        new = [self._run_of(item, None) for item in starts]
        outcomes = self.store.create_runs(new, now=self.clock.now()) if new else []
        if any(created for _, created in outcomes):
            self.notify()
        conflicts: list[RunConflict] = []
        for run, (record, created) in zip(new, outcomes, strict=True):
            if not created and run.debounce is None:
                try:
                    check_same_start(record, run.workflow, run.input)
                except RunConflict as conflict:
                    conflicts.append(conflict)
        if conflicts:
            raise conflicts[0]
        return [Started(record, created) for record, created in outcomes]

    async def start_async(
        self,
        workflow: Workflow | str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        by: str | None = None,
        **options: Unpack[StartOptions],
    ) -> Started:
        """`start` from an event loop: the store call runs in a thread (in the caller's
        context, so its trace id is the default correlation id there too)."""
        return await self.start_one_async(Start(workflow, args, kwargs, **options), by=by)

    async def start_one_async(self, start: Start, *, by: str | None = None) -> Started:
        """`start_one` from an event loop: the store call runs in a thread."""
        return await asyncio.to_thread(partial(self.start_one, start, by=by))

    async def start_many_async(self, starts: Sequence[Start]) -> list[Started]:
        """`start_many` from an event loop: the store call runs in a thread."""
        return await asyncio.to_thread(self.start_many, starts)

    def start_json(
        self, workflow: str, input: str, *, by: str | None = None, **options: Unpack[StartOptions]
    ) -> Started:
        """`start` with the input as JSON a person wrote: a list (the arguments by position)
        or an object (by name), each read strictly through its parameter's type hint (an
        object for a dataclass, a string for a datetime; "5" is no int)."""
        definition = workflow_of(self.registry, workflow)
        what = f"workflow {definition.name!r}"
        args, kwargs = decode_given_call(input, definition.fn, what=what)
        return self.start_one(Start(definition, args, kwargs, **options), by=by)

    # -- a person's actions on parked runs ----------------------------------------------
    # Each is recorded in the run's history with who did it (`by`), and in the audit trail
    # in the same transaction, and wakes local workers.

    def retry(self, run_id: str, *, by: str | None = None, from_step: int | None = None) -> None:
        """Fresh attempts for a parked run, with the same idempotency keys (or every step
        from `from_step`, none of which may have completed)."""
        by = self.who(by)
        now, via = self.clock.now(), self.via
        dead_letters.retry(self.store, run_id, now=now, by=by, via=via, from_step=from_step)
        self.notify()

    def skip_step(self, run_id: str, *, by: str | None = None, result: Any = None) -> None:
        """Record `result` for the failed step (or answer an escalation); the run goes on.
        It is checked against the step's return type hint like the step's own result."""
        by = self.who(by)
        hint = self._skipped_hint(run_id)
        self._skip(run_id, encode(result, hint, what=_SKIPPED), by)

    def skip_step_json(self, run_id: str, result: str, *, by: str | None = None) -> None:
        """`skip_step` with the result as JSON a person wrote. With the app's registry it is
        read strictly through the step's return type hint (PayloadError if it does not fit);
        without one, it is recorded as given (it must be JSON)."""
        by = self.who(by)
        if self.registry is None:
            self._skip(run_id, result, by)
            return
        hint = self._skipped_hint(run_id)
        value = decode_given(result, hint, what=_SKIPPED)
        self._skip(run_id, encode(value, hint, what=_SKIPPED), by)

    def fail(
        self, run_id: str, *, by: str | None = None, reason: str = "failed by a person"
    ) -> None:
        """Give up on a parked run: its completed steps are compensated, then it fails."""
        by = self.who(by)
        now, via = self.clock.now(), self.via
        dead_letters.fail(self.store, run_id, now=now, by=by, via=via, reason=reason)
        self.notify()

    def release(self, run_id: str, *, by: str | None = None) -> Released:
        """The run's worker is dead: end the leases it holds, this run's and its others', so
        that the next worker to poll takes them over now. Recorded in the audit trail."""
        by = self.who(by)
        now = self.clock.now()
        worker, count = dead_letters.release(self.store, run_id, now=now)
        entry = audit_of(Action.RELEASE, by, self.via, worker=worker, leases=count)
        self.store.record_audit(entry, now=now, run_id=run_id)
        self.notify()
        return Released(worker, count)

    def record(self, action: Action, *, by: str | None = None) -> None:
        """Record in the audit trail an action that is no write of the store's (a dashboard
        login or logout)."""
        entry = audit_of(action, self.who(by), self.via)
        self.store.record_audit(entry, now=self.clock.now())

    # -- steering a run: cancel, pause, resume --------------------------------------------

    def cancel(self, run_id: str, *, by: str | None = None, reason: str | None = None) -> Steered:
        """Cancel the run, wherever it is (running, waiting, paused, parked): its async step
        in flight is cancelled, its completed steps are compensated in reverse order, and it
        ends `cancelled`. A second cancel changes nothing and says so; DurablyError for a run
        that has finished otherwise."""
        by = self.who(by)
        now, via = self.clock.now(), self.via
        steered = control.cancel(self.store, run_id, now=now, by=by, reason=reason, via=via)
        self.notify()
        return steered

    def pause(self, run_id: str, *, by: str | None = None, reason: str | None = None) -> Steered:
        """Pause a pending or running run: it starts no new step or undo (one in flight
        finishes and is recorded), and timers that come due wait, until it is resumed."""
        by = self.who(by)
        now, via = self.clock.now(), self.via
        steered = control.pause(self.store, run_id, now=now, by=by, reason=reason, via=via)
        self.notify()
        return steered

    def resume(self, run_id: str, *, by: str | None = None) -> Steered:
        """Resume a paused run from where it stopped."""
        by = self.who(by)
        steered = control.resume(self.store, run_id, now=self.clock.now(), by=by, via=self.via)
        self.notify()
        return steered

    def restart(
        self,
        run_id: str,
        *,
        from_step: int | str | None = None,
        by: str | None = None,
        id: str | None = None,
    ) -> RunRecord:
        """Restart an ended run from a step (its position, or the name of its first call;
        default: the first step that failed, was cancelled or undone): a new run (`id`,
        default `<run>.restart-<n>`) that reuses the recorded outcomes before that step and
        runs for real from there, with fresh idempotency keys. Both histories link to each
        other."""
        by = self.who(by)
        now, via = self.clock.now(), self.via
        run = restarts.restart(
            self.store, run_id, from_step=from_step, now=now, by=by, via=via, new_id=id
        )
        self.notify()
        return run

    @property
    def webhooks(self) -> Webhooks:
        """Outbound webhooks: subscribe URLs to runs' state changes, read and retry their
        deliveries (durably.client.webhooks)."""
        return Webhooks(self)

    @property
    def bulk(self) -> Bulk:
        """Cancel, retry, pause, resume or restart every run a filter matches, as a job that
        survives a crash and resumes where it stopped (durably.client.bulk)."""
        return Bulk(self)

    # -- approvals (durably.approval) and escalations -----------------------------------

    def decide(
        self,
        run_id: str,
        name: str,
        *,
        approved: bool,
        by: str | None = None,
        comment: str | None = None,
    ) -> Decision:
        """Approve or reject the pending approval `name` of a run, as an operator (no token).
        An escalation (`name` "durably.escalate") is answered True or False."""
        by = self.who(by)
        if name == ESCALATION:  # answered like a skipped step; the comment is not recorded
            approvals.check_escalation(self.store, run_id)
            action = Action.APPROVE if approved else Action.REJECT
            self._skip(run_id, json.dumps(approved), by, action=action)
            return Decision(approved, by, self.clock.now(), comment)
        decision = approvals.decide(
            self.store,
            run_id,
            name,
            approved=approved,
            by=by,
            via=self.via,
            now=self.clock.now(),
            comment=comment,
        )
        self.notify()
        return decision

    def decide_with_token(
        self, token: str, *, approved: bool, by: str | None = None, comment: str | None = None
    ) -> Decision:
        """Approve or reject the approval `token` was made for: once, whoever holds it."""
        by = self.who(by)
        decision = approvals.decide_with_token(
            self.store,
            token,
            approved=approved,
            by=by,
            via=self.via,
            now=self.clock.now(),
            comment=comment,
        )
        self.notify()
        return decision

    # -- commands from outside a run ----------------------------------------------------

    def send(
        self,
        run_id: str,
        kind: str,
        *,
        by: str | None = None,
        name: str | None = None,
        data: Any = None,
        dedupe_key: str | None = None,
    ) -> Delivered:
        """Put a message in the run's inbox: its lease holder folds it into the history
        (a `message_received` event) exactly once. A waiting run is woken to do so; a running
        one folds it once it hands itself back to wait (due at once then) or at its next
        claim; a parked one keeps it until a person acts.

        `data` is encoded as JSON (PayloadError if it would not read back unchanged). A second
        message with the same `dedupe_key` is not stored again. RunNotFound if no run has this
        id; DurablyError if the run has ended."""
        delivered = messages.send(
            self.store,
            run_id,
            kind,
            by=self.who(by),
            via=self.via,
            name=name,
            data=data,
            dedupe_key=dedupe_key,
            max_payload=self.max_payload,
            now=self.clock.now(),
        )
        if delivered.stored:
            self.notify()  # a local worker may claim the woken run at once
        return delivered

    def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        dedupe_key: str | None = None,
    ) -> Delivered:
        """Send the signal `name` to the run: its oldest durably.wait_for_signal(name) that
        has none yet takes it (woken if it waits), or the next one it makes; signals of one
        name queue up in the order they were sent. `payload` must be JSON (PayloadError
        otherwise); the same `dedupe_key` twice stores it once. RunNotFound for an unknown
        run; DurablyError, naming its status, for a run that has finished."""
        messages.check_signal(self.store, run_id, name)
        return self.send(run_id, SIGNAL_KIND, by=by, name=name, data=payload, dedupe_key=dedupe_key)

    def signal_json(
        self, run_id: str, name: str, payload: str, *, by: str | None = None
    ) -> Delivered:
        """`signal` with the payload as JSON text a person wrote (`durably signal`)."""
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise DurablyError(f"the signal's --data is not JSON: {exc}") from None
        return self.signal(run_id, name, value, by=by)

    async def signal_async(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        dedupe_key: str | None = None,
    ) -> Delivered:
        """`signal` from an event loop: the store call runs in a thread."""
        return await asyncio.to_thread(
            self.signal, run_id, name, payload, by=by, dedupe_key=dedupe_key
        )

    async def send_async(
        self,
        run_id: str,
        kind: str,
        *,
        by: str | None = None,
        name: str | None = None,
        data: Any = None,
        dedupe_key: str | None = None,
    ) -> Delivered:
        """`send` from an event loop: the store call runs in a thread."""
        return await asyncio.to_thread(
            self.send, run_id, kind, by=by, name=name, data=data, dedupe_key=dedupe_key
        )

    # -- local workers ------------------------------------------------------------------

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after every run this client starts and every action it takes (so
        a worker in this process wakes at once); returns the unsubscribe call. A start that
        finds its run already there makes nothing new due, and calls nobody."""
        with self._listeners_lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._listeners_lock:
                self._listeners.remove(listener)

        return unsubscribe

    def offer(self, taker: Taker) -> Callable[[], None]:
        """Let a worker in this process take the runs this client starts that it would claim
        at once: each is created already claimed for it, in its start's commit, and handed to
        it (durably.client.starts.Takers); returns the withdrawal."""
        return self._takers.offer(taker)

    def who(self, by: str | None) -> str:
        """Who acts: `by`, else the client's (recorded in the run's history)."""
        return check_name(self.by if by is None else by, "who acts (by)")

    def notify(self) -> None:
        """Tell this process's listeners (its workers) that runs may be due now."""
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    # -- helpers ------------------------------------------------------------------------

    def _run_of(self, item: Start, by: str | None) -> NewRun:
        """The run to create; a person's start (`by` given, or a client the CLI, the API or
        the dashboard acts through) carries its audit entry."""
        run = new_run(item, self.registry, max_payload=self.max_payload, now=self.clock.now())
        if by is None and self.via is Via.LIBRARY:
            return run
        audit = audit_of(Action.START, self.who(by), self.via, debounce=run.debounce)
        return dataclasses.replace(run, audit=audit)

    def _create(self, new: NewRun) -> Started:
        if (claimed := self._takers.create(new)) is not None:
            return Started(claimed, True)  # a worker here runs it: none to wake
        record, created = self._starter.create(new)
        if created:
            self.notify()
        elif new.debounce is None:  # a debounced start that joined its key's run: no conflict
            check_same_start(record, new.workflow, new.input)
        return Started(record, created)

    def _skip(
        self, run_id: str, result_json: str, by: str, *, action: Action = Action.SKIP
    ) -> None:
        dead_letters.skip_step(
            self.store,
            run_id,
            now=self.clock.now(),
            by=by,
            via=self.via,
            result_json=result_json,
            recorded_as=action,
        )
        self.notify()

    def _skipped_hint(self, run_id: str) -> Any:
        """The return type hint of the step a parked run failed at (none if the app does
        not define it, or the client knows no app)."""
        name = dead_letters.failed_step(self.store, run_id)
        step = None if name is None or self.registry is None else self.registry.step_named(name)
        return NO_HINT if step is None else step.return_hint
