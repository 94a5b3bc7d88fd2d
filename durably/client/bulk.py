"""Acting on every run a filter matches: bulk jobs (durably.core.bulk), made, resumed and run
through the one client. Each run's action is the one a person takes on a single run (the
same checks, the same records in its history, with who acted), recorded in the audit trail
as an action of the job.

    job = app.client.bulk.act("cancel", RunFilter(workflow="checkout", status="pending"))

A job selects its runs when it is made, then acts on them a batch at a time. Stopped half-way
(a crash, Ctrl-C, a server that stops), it is resumed where it stopped by `run(job.id)`, or
by beginning the same action on the same filter again as the same person: the runs it acted
on already are not acted on again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from durably.client import control, dead_letters, restarts
from durably.clock import Clock
from durably.core.audit import Via
from durably.core.bulk import (
    AlreadySettled,
    BulkAction,
    BulkJob,
    BulkRun,
    Matching,
    NewBulkJob,
    Outcome,
    RunFilter,
    refusal,
)
from durably.core.names import check_name
from durably.errors import DurablyError, PayloadError, StoreError, UnknownBulkJob
from durably.stores.protocol import Store

__all__ = ["BATCH", "Begun", "Bulk"]

BATCH = 100  # runs acted on between two records of a job's progress

_REASONED = frozenset({BulkAction.CANCEL, BulkAction.PAUSE})  # the actions that take a reason


@dataclass(frozen=True, slots=True)
class Begun:
    """What `Bulk.begin` found: the job to run (None: no run matches the filter, and no job
    was made), and whether it is an unfinished job of the same action, filter and person,
    resumed rather than made again."""

    job: BulkJob | None
    resumed: bool


class Host(Protocol):
    """What a bulk job needs of the client it acts through."""

    @property
    def store(self) -> Store: ...

    clock: Clock
    via: Via

    def who(self, by: str | None) -> str: ...

    def notify(self) -> None: ...


class Bulk:
    """Bulk jobs on the client's store, as the client's person (`by`) through its way in
    (`via`); `app.client.bulk`."""

    def __init__(self, client: Host) -> None:
        self._client = client

    @property
    def _store(self) -> Store:
        return self._client.store

    def preview(
        self,
        action: BulkAction | str,
        run_filter: RunFilter,
        *,
        every: bool = False,
        limit: int = 10,
    ) -> Matching:
        """What `begin` would select now, changing nothing (a dry run): how many runs match,
        by status (`fitting(action)` of them the action would act on), and the first ids."""
        _check(_action_of(action), run_filter, every)
        return self._store.matching(run_filter, limit=limit)

    def count(self, run_filter: RunFilter) -> int:
        """How many runs the filter matches now (every run, for a filter that names none)."""
        return self._store.matching(run_filter, limit=0).total

    def begin(
        self,
        action: BulkAction | str,
        run_filter: RunFilter,
        *,
        every: bool = False,
        by: str | None = None,
        reason: str | None = None,
    ) -> Begun:
        """Make the job that does `action` to every run `run_filter` matches now (a filter that
        names nothing needs `every=True`), or find the same person's unfinished job of the same
        action and filter to resume; run it with `run`. `reason`: a cancel's or a pause's,
        recorded in each run's history."""
        wanted = _action_of(action)
        _check(wanted, run_filter, every)
        if reason is not None:
            if wanted not in _REASONED:
                raise PayloadError(f"a {wanted} takes no reason: only a cancel or a pause does")
            check_name(reason, "the reason")
        who = self._client.who(by)
        new = NewBulkJob(_new_id(), wanted, run_filter, who, self._client.via, reason)
        found = self.unfinished(wanted, run_filter, by=who)
        if found is None and self._store.matching(run_filter, limit=0).total == 0:
            return Begun(None, False)
        job, made = self._store.create_bulk_job(new, now=self._client.clock.now())
        return Begun(job, not made)

    def unfinished(
        self, action: BulkAction | str, run_filter: RunFilter, *, by: str | None = None
    ) -> BulkJob | None:
        """The person's unfinished job of this action and filter, if there is one: what
        `begin` resumes."""
        wanted, who = _action_of(action), self._client.who(by)
        for job in self._store.bulk_jobs(limit=1000, unfinished=True):
            if job.by == who and job.action is wanted and job.filter == run_filter:
                return job
        return None

    def run(
        self,
        job_id: str,
        *,
        batch: int = BATCH,
        progress: Callable[[BulkJob], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> BulkJob:
        """Act on the job's runs it has yet to settle, `batch` at a time, until none is left
        (or `stop()` says so, between two runs); the job as it is then. `progress(job)` after
        each batch. A run the action does not fit is skipped, with why; a store that cannot be
        reached stops the job (StoreUnavailable), to be run again later."""
        job = self.job(job_id)
        while not job.finished and not (stop is not None and stop()):
            pending = self._store.bulk_runs(job_id, outcome=None, limit=batch)
            skipped: dict[str, str] = {}
            for item in pending:
                if stop is not None and stop():
                    break
                note = self._act(job, item.run_id)
                if note is not None:
                    skipped[item.run_id] = note
            settled = self._store.settle_bulk_runs(job_id, skipped, now=self._client.clock.now())
            self._client.notify()
            job = settled if settled is not None else self.job(job_id)
            if progress is not None:
                progress(job)
        return job

    def act(
        self,
        action: BulkAction | str,
        run_filter: RunFilter,
        *,
        every: bool = False,
        by: str | None = None,
        reason: str | None = None,
    ) -> BulkJob | None:
        """`begin`, then `run` to the end: the finished job (None: no run matched)."""
        begun = self.begin(action, run_filter, every=every, by=by, reason=reason)
        return None if begun.job is None else self.run(begun.job.id)

    def job(self, job_id: str) -> BulkJob:
        """The job and its progress; UnknownBulkJob if there is none with this id."""
        found = self._store.bulk_job(job_id)
        if found is None:
            raise UnknownBulkJob(
                f"no bulk job has the id {job_id!r} in {self._store.url} "
                "(durably runs bulk list shows them)"
            )
        return found

    def jobs(self, *, limit: int = 50, unfinished: bool = False) -> list[BulkJob]:
        """The newest jobs first (`unfinished`: only those with runs left to act on)."""
        return self._store.bulk_jobs(limit=limit, unfinished=unfinished)

    def skipped(self, job_id: str, *, limit: int = 100) -> list[BulkRun]:
        """The job's runs it skipped, each with why, by id."""
        self.job(job_id)
        return self._store.bulk_runs(job_id, outcome=Outcome.SKIPPED, limit=limit)

    def _act(self, job: BulkJob, run_id: str) -> str | None:
        """Act on one run of the job: None once it is acted on (now, or by an earlier try of
        the job), else why it is skipped."""
        run = self._store.get_run(run_id)
        if run is None:
            return "it is no longer in the store (deleted since the job was made)"
        why = refusal(job.action, run.status)
        if why is not None:
            return why
        try:
            return _ACTIONS[job.action](self._store, job, run_id, self._client.clock.now())
        except AlreadySettled:
            return None
        except StoreError:
            raise
        except DurablyError as refused:  # the run changed since it was read: as it says
            return str(refused)


# Each action on one run of a job: None once it acted, else why it did nothing (its note)


def _cancel(store: Store, job: BulkJob, run_id: str, now: datetime) -> str | None:
    steered = control.cancel(
        store, run_id, now=now, by=job.by, reason=job.reason, via=job.via, job=job.id
    )
    return None if steered.changed else steered.note


def _pause(store: Store, job: BulkJob, run_id: str, now: datetime) -> str | None:
    steered = control.pause(
        store, run_id, now=now, by=job.by, reason=job.reason, via=job.via, job=job.id
    )
    return None if steered.changed else steered.note


def _resume(store: Store, job: BulkJob, run_id: str, now: datetime) -> str | None:
    steered = control.resume(store, run_id, now=now, by=job.by, via=job.via, job=job.id)
    return None if steered.changed else steered.note


def _retry(store: Store, job: BulkJob, run_id: str, now: datetime) -> str | None:
    dead_letters.retry(store, run_id, now=now, by=job.by, via=job.via, job=job.id)
    return None


def _restart(store: Store, job: BulkJob, run_id: str, now: datetime) -> str | None:
    restarts.restart(store, run_id, from_step=None, now=now, by=job.by, via=job.via, job=job.id)
    return None


_ACTIONS: dict[BulkAction, Callable[[Store, BulkJob, str, datetime], str | None]] = {
    BulkAction.CANCEL: _cancel,
    BulkAction.PAUSE: _pause,
    BulkAction.RESUME: _resume,
    BulkAction.RETRY: _retry,
    BulkAction.RESTART: _restart,
}


def _action_of(action: BulkAction | str) -> BulkAction:
    try:
        return BulkAction(action)
    except ValueError:
        known = ", ".join(BulkAction)
        raise PayloadError(
            f"{action!r} is not an action on runs in bulk (one of: {known})"
        ) from None


def _check(action: BulkAction, run_filter: RunFilter, every: bool) -> None:
    """Refuse a filter that names nothing, unless acting on every run is what is meant."""
    if run_filter.empty and not every:
        raise PayloadError(
            f"the filter names no runs, so a {action} would act on every run in the store: "
            "narrow it (workflow, status, since, until, key, queue), or say that every run "
            "is meant (--all; all=true in the API; every=True in Python)"
        )


def _new_id() -> str:
    return f"bulk-{uuid.uuid4().hex[:12]}"
