"""What a store keeps of bulk jobs (durably.core.bulk): the part of the Store protocol that
makes a job with its runs, reads its progress, and settles its runs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from durably.core.bulk import BulkJob, BulkRun, Matching, NewBulkJob, Outcome, RunFilter

__all__ = ["BulkStore"]


class BulkStore(Protocol):
    """Bulk jobs. A job's run is settled as acted on by the write that acts on it: an Audit
    whose `job` is set, recorded with any write (a message, a checkpoint, a fork), settles
    that run of the job in the same transaction, or raises core.bulk.AlreadySettled, writing
    nothing, if the job settled it already. Runs it skips are settled by
    `settle_bulk_runs`."""

    def create_bulk_job(self, job: NewBulkJob, *, now: datetime) -> tuple[BulkJob, bool]:
        """Make the job and select the runs its filter matches now, in one transaction (the
        set is fixed from then on); finished at once if none matches. If the same person
        (`job.by`) has an unfinished job of the same action and filter (`job.fingerprint`),
        nothing is made: that job is returned, and False."""
        ...

    def matching(self, run_filter: RunFilter, *, limit: int) -> Matching:
        """How many runs the filter matches now, by status, and the first `limit` ids (in
        order of id): a dry run, which changes nothing."""
        ...

    def bulk_job(self, job_id: str) -> BulkJob | None: ...

    def bulk_jobs(self, *, limit: int, unfinished: bool = False) -> list[BulkJob]:
        """Up to `limit` jobs, the newest first; with `unfinished`, only those with runs left
        to settle."""
        ...

    def bulk_runs(self, job_id: str, *, outcome: Outcome | None, limit: int) -> list[BulkRun]:
        """Up to `limit` runs of the job settled with `outcome` (None: not settled yet), in
        order of id."""
        ...

    def settle_bulk_runs(
        self, job_id: str, skipped: Mapping[str, str], *, now: datetime
    ) -> BulkJob | None:
        """Settle these runs of the job as skipped, each with why (a run settled already is
        left as it is), and mark the job finished once no run is left; the job as it is then
        (None for an unknown job)."""
        ...
