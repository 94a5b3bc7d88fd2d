"""Reading runs: one run, pages of runs, their histories and results, waiting for an end,
the dead letters and approvals waiting for a person, the workers, the gates, the counts a
dashboard shows. `Client` is a RunReader that also starts runs and acts on them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from durably.client import approvals, dead_letters, exports, pages, queries
from durably.client.approvals import PendingApproval
from durably.client.audit import AuditPage, audit_page
from durably.client.dead_letters import DeadLetter
from durably.client.outcomes import DEFAULT_POLL, Finishes, wait_for_end, wait_for_end_async
from durably.client.pages import RunPage
from durably.client.published import Published
from durably.client.queries import Answer
from durably.client.starts import Definitions
from durably.clock import Clock, SystemClock
from durably.codec.encoding import decode
from durably.codec.parameters import NO_HINT
from durably.core.attributes import check_wanted
from durably.core.history import Event
from durably.core.names import check_name
from durably.core.status import RunStatus
from durably.durations import Duration
from durably.errors import DurablyError, RunNotFound, UnknownWorkflow, WorkflowFailed
from durably.resilience.gates import GateState
from durably.stores.protocol import Store
from durably.stores.records import Ended, Happened, RunRecord, RunStats, WorkerBeat

__all__ = ["RunReader"]


class RunReader:
    """Read runs on one store. `store` is a Store, or a call that returns one; `registry`
    (the app's workflows and steps) types the results it reads; `clock` says when now is."""

    def __init__(
        self,
        store: Store | Callable[[], Store],
        *,
        registry: Definitions | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self.registry = registry
        self.clock: Clock = clock or SystemClock()
        self._finishes = Finishes(lambda: self.store)  # listens from the first wait on
        # what runs publish: events, progress, streams (listens from the first wait on)
        self.published = Published(lambda: self.store, self.get, self._finishes)

    @property
    def store(self) -> Store:
        return self._store() if callable(self._store) else self._store

    def get(self, run_id: str) -> RunRecord:
        """The run's current state; RunNotFound if no run has this id."""
        if "\x00" in run_id:  # no run can have it (PostgreSQL would refuse the query itself)
            raise RunNotFound(f"no run has the id {run_id!r}: a run's id holds no NUL byte")
        record = self.store.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run has the id {run_id!r} in {self.store.url}")
        return record

    def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        patch: str | None = None,
        correlation_id: str | None = None,
        happened: Collection[Happened | str] = (),
        slower_than: Duration | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        key: str | None = None,
        queue: str | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> RunPage:
        """A page of runs, most recently updated first (ties by id); `cursor` is the previous
        page's next_cursor. A run that stays put is listed exactly once; one updated between
        two pages moves to the front, ahead of the cursor: later pages do not show it (again).
        `patch`: only the runs still on the old side of that patch (not ended): those that
        keep it from being retired. `correlation_id`: only the runs started with it.
        `happened`: only the runs to which each of these happened (`"taken_over"`,
        `"retried"`, `"compensated"`). `slower_than`: only the runs whose last change came
        longer than this after their start. `since`, `until`: only the runs started at or
        after, before, these times (with their time zone). `key`, `queue`: only the runs
        started with this key, on this queue ("default": the default queue). `attributes`:
        only the runs started with each of these (durably.core.attributes)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise DurablyError(f"a page holds at least 1 run: limit={limit!r}")
        for name, given in (
            ("workflow", workflow),
            ("patch", patch),
            ("correlation_id", correlation_id),
            ("key", key),
            ("queue", queue),
        ):
            if given is not None:
                check_name(given, f"the {name} to look for")
        wanted = None if status is None else pages.status_of(status)
        after = None if cursor is None else pages.after(cursor)
        # One more than asked: whether there is a next page, without a last empty one.
        found = self.store.runs(
            status=wanted,
            workflow=workflow,
            limit=limit + 1,
            after=after,
            patch=patch,
            correlation_id=correlation_id,
            happened=pages.happened_of(happened),
            slower_than=None
            if slower_than is None
            else pages.duration_of(slower_than, "slower_than"),
            since=None if since is None else pages.moment_of(since, "since"),
            until=None if until is None else pages.moment_of(until, "until"),
            key=key,
            queue=queue,
            attributes=None if attributes is None else check_wanted(attributes),
        )
        page = found[:limit]
        return RunPage(page, pages.cursor(page[-1]) if len(found) > limit else None)

    def wait(
        self, run_id: str, *, timeout: Duration | None = None, poll: Duration = DEFAULT_POLL
    ) -> RunRecord:
        """The run's record once it has ended (completed, failed, timed out, cancelled).

        Woken by the store when the run ends (durably.client.outcomes), and reads it again every
        `poll` in case that word is lost. A store outage is waited out; TimeoutError at
        `timeout` names the status last seen, or the last store error."""
        return wait_for_end(
            self._finishes, lambda: self.get(run_id), run_id, timeout=timeout, poll=poll
        )

    async def wait_async(
        self,
        run_id: str,
        *,
        timeout: Duration | None = None,  # noqa: ASYNC109 (wait()'s own, on the loop too)
        poll: Duration = DEFAULT_POLL,
    ) -> RunRecord:
        """`wait` from an event loop: reads run in a thread, the wait is on the loop."""
        return await wait_for_end_async(
            self._finishes, lambda: self.get(run_id), run_id, timeout=timeout, poll=poll
        )

    def close(self) -> None:
        """Stop listening for runs that end (until the next `wait`); the store is not
        closed: it is the caller's."""
        self._finishes.close()
        self.published.close()

    def export(self, run_id: str) -> dict[str, Any]:
        """The run and its whole history as JSON-ready data (`durably runs export`), for a
        replay test (durably.testing.replay); RunNotFound if no run has this id."""
        run = self.get(run_id)
        return exports.export_run(run, self.store.history(run_id))

    def workers(self) -> list[WorkerBeat]:
        """The workers that said lately they are alive (and the dead ones not yet dropped),
        with the versions of each workflow they run."""
        return self.store.workers()

    def history(self, run_id: str) -> list[Event]:
        """The run's events in order; RunNotFound if no run has this id."""
        self.get(run_id)
        return self.store.history(run_id)

    def ask(
        self, run_id: str, name: str, args: str = "[]", *, timeout: Duration | None = None
    ) -> Answer:
        """The run's answer to the query `name` (a handler its workflow registered with
        durably.query), with `args` (a JSON list): its history is replayed here against the
        app's code (which this client must know), running no step and writing nothing.
        TimeoutError once `timeout` passes; see durably.runtime.queries for the rest."""
        registry = queries.registry_of(self.registry)
        return queries.ask(self.store, registry, run_id, name, args, timeout=timeout)

    def attributes(self, run_id: str) -> dict[str, str]:
        """The attributes the run was started with, by name (durably.core.attributes);
        RunNotFound if no run has this id."""
        self.get(run_id)
        return self.store.attributes([run_id]).get(run_id, {})

    def outcome(self, record: RunRecord) -> Any:
        """The result of a completed run, read through its workflow's return type hint;
        WorkflowFailed for a run that ended otherwise."""
        if record.status is RunStatus.COMPLETED:
            assert record.result is not None
            what = f"the result of run {record.id!r}"
            return decode(record.result, self._return_hint(record.workflow), what=what)
        error = record.error
        raise WorkflowFailed(
            record.id,
            record.status,
            error.error_class if error else "unknown",
            error.message if error else "",
        )

    def dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """Runs parked for a person (needs_attention, compensation_failed), newest first."""
        return dead_letters.dead_letters(self.store, limit=limit)

    def approvals(self, *, limit: int = 100) -> list[PendingApproval]:
        """Approvals and escalations waiting for a person, oldest request first."""
        return approvals.pending_approvals(self.store, limit=limit)

    def audit(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        by: str | None = None,
        run_id: str | None = None,
    ) -> AuditPage:
        """The audit trail, newest first, a page at a time (`cursor`: the previous page's
        next_cursor): every action people and tokens took, across runs. `since`, `until`:
        only entries recorded at or after, before, these times (with their time zone);
        `by`: only those of who acted so; `run_id`: only those on that run."""
        return audit_page(
            self.store, limit=limit, cursor=cursor, since=since, until=until, by=by, run_id=run_id
        )

    def gates(self) -> dict[str, GateState]:
        """Each dependency's breaker and limits (durably.resilience.gates), by name: what
        `durably breakers` and the dashboard show (durably.views.breakers)."""
        return {name: GateState.load(text) for name, text in sorted(self.store.gates().items())}

    def stats(self) -> RunStats:
        """Runs by status, the oldest not ended, the due ones waiting: one query."""
        return self.store.stats(now=self.clock.now())

    def activity(self, *, since: datetime) -> list[Ended]:
        """How many runs ended (or were parked) in each minute since `since`, by status."""
        return self.store.activity(since=since)

    def prunable(self, before: datetime) -> int:
        """How many runs ended before `before`: what `prune` deletes, batch after batch."""
        return self.store.prunable(before)

    def prune(self, before: datetime, *, limit: int) -> int:
        """Delete up to `limit` runs that ended before `before`, with their histories (never
        a parked, paused or unfinished one); how many."""
        return self.store.prune(before, limit=limit)

    def _return_hint(self, workflow: str) -> Any:
        if self.registry is None:
            return NO_HINT
        try:
            return self.registry.workflow_named(workflow).return_hint
        except UnknownWorkflow:  # another app's run, or a workflow since removed
            return NO_HINT
