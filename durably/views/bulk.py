"""The API's bodies for bulk actions (durably.core.bulk): the request that acts on every run a
filter matches, a job with its progress, and a dry run's counts; `durably runs bulk --json`
prints the same shapes."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from durably.core.attributes import MAX_ATTRIBUTES
from durably.core.bulk import MAX_IDS, BulkAction, BulkJob, BulkRun, Matching, RunFilter
from durably.core.names import MAX_NAME, NAME_PATTERN, RUN_ID_PATTERN
from durably.core.status import RunStatus

__all__ = ["BulkIn", "BulkJobOut", "BulkPreviewOut", "BulkRunOut", "RunFilterIn"]

_STRICT = ConfigDict(extra="forbid")
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]
RunId = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=RUN_ID_PATTERN)]


class RunFilterIn(BaseModel):
    """Which runs: each field given narrows the selection."""

    model_config = _STRICT
    workflow: Name | None = Field(default=None, description="Only this workflow's runs")
    status: RunStatus | None = Field(default=None, description="Only runs in this status")
    since: AwareDatetime | None = Field(
        default=None, description="Only runs started at or after it (ISO 8601, with zone)"
    )
    until: AwareDatetime | None = Field(
        default=None, description="Only runs started before it (ISO 8601, with zone)"
    )
    key: Name | None = Field(default=None, description="Only runs started with this key")
    queue: Name | None = Field(
        default=None, description='Only runs on this queue ("default": the default one)'
    )
    attributes: dict[Name, Name] | None = Field(
        default=None,
        max_length=MAX_ATTRIBUTES,
        description="Only runs with these attributes (each must match)",
    )
    ids: list[RunId] | None = Field(  # the dashboard's selection, or a list a script made
        default=None,
        min_length=1,
        max_length=MAX_IDS,
        description=f"Only these runs, by id (1 to {MAX_IDS})",
    )

    def to_filter(self) -> RunFilter:
        """The filter, checked as a whole (PayloadError: since not before until)."""
        return RunFilter(
            workflow=self.workflow,
            status=self.status,
            since=self.since,
            until=self.until,
            key=self.key,
            queue=self.queue,
            attributes=self.attributes,
            ids=None if self.ids is None else tuple(self.ids),
        )


class BulkIn(BaseModel):
    model_config = _STRICT
    action: BulkAction = Field(description="What to do to each run")
    filter: RunFilterIn = Field(default_factory=lambda: RunFilterIn(), description="Which runs")
    all: bool = Field(
        default=False,
        description="Act on every run in the store: needed when the filter names nothing",
    )
    dry_run: bool = Field(
        default=False, description="Only count the runs that match, and name the first: no job"
    )
    reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=NAME_PATTERN,
        description="A cancel's or a pause's, recorded in each run's history",
    )


class BulkJobOut(BaseModel):
    id: str
    action: str
    filter: dict[str, Any] = Field(description="The filter as given (only the fields set)")
    by: str = Field(description="Who acts: recorded in each run's history and the audit trail")
    via: str
    reason: str | None
    state: str = Field(description="running (runs left to act on) or finished")
    total: int = Field(description="Runs the filter matched when the job was made")
    done: int = Field(description="Runs settled so far: acted on or skipped")
    acted: int
    skipped: int = Field(description="Runs the action did not fit (the job's page says why)")
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    resumed: bool = Field(
        default=False,
        description="True: the same person's unfinished job of the same action and filter, "
        "resumed rather than made again",
    )
    link: str = Field(description="Where its progress is read")

    @classmethod
    def of(cls, job: BulkJob, *, resumed: bool = False) -> BulkJobOut:
        return cls(
            id=job.id,
            action=str(job.action),
            filter=json.loads(job.filter.to_json()),
            by=job.by,
            via=str(job.via),
            reason=job.reason,
            state=job.state,
            total=job.total,
            done=job.done,
            acted=job.acted,
            skipped=job.skipped,
            created_at=job.created_at,
            updated_at=job.updated_at,
            finished_at=job.finished_at,
            resumed=resumed,
            link=f"/api/runs/bulk/{job.id}",
        )


class BulkPreviewOut(BaseModel):
    """A dry run, or a request whose filter matches nothing (then no job is made)."""

    action: str
    filter: dict[str, Any]
    matching: int = Field(description="Runs the filter matches now")
    fitting: int = Field(description="Of them, the runs the action would act on")
    by_status: dict[str, int]
    first: list[str] = Field(description="The first of their ids, in order")
    job: None = Field(default=None, description="No job is made")

    @classmethod
    def of(cls, action: BulkAction, run_filter: RunFilter, found: Matching) -> BulkPreviewOut:
        return cls(
            action=str(action),
            filter=json.loads(run_filter.to_json()),
            matching=found.total,
            fitting=found.fitting(action),
            by_status={str(status): count for status, count in sorted(found.by_status.items())},
            first=found.first,
        )


class BulkRunOut(BaseModel):
    run: str
    why: str | None = Field(description="Why the action skipped it")

    @classmethod
    def of(cls, item: BulkRun) -> BulkRunOut:
        return cls(run=item.run_id, why=item.note)
