"""The pure part of bulk jobs (durably.core.bulk): a filter reads back from its stored JSON
equal, maps onto Store.runs's keywords, says what it names in a line; the statuses each
action fits; a job's progress."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from durably.core.audit import Via
from durably.core.bulk import (
    BulkAction,
    BulkJob,
    Matching,
    NewBulkJob,
    RunFilter,
    acts_on,
    refusal,
)
from durably.core.status import FINAL, PARKED, RunStatus
from durably.errors import PayloadError

AT = datetime(2026, 11, 27, 10, tzinfo=UTC)


def test_a_filter_reads_back_equal_from_its_json() -> None:
    given = RunFilter(
        workflow="checkout",
        status=RunStatus.FAILED,
        since=AT,
        until=AT + timedelta(hours=1),
        key="customer-42",
        queue="default",
        ids=("o-2", "o-1"),
    )

    assert RunFilter.from_json(given.to_json()) == given
    assert RunFilter.from_json(RunFilter().to_json()) == RunFilter()
    assert RunFilter(status="failed") == RunFilter(status=RunStatus.FAILED)  # type: ignore[arg-type]
    assert RunFilter(ids=("a", "b", "a")).ids == ("a", "b")  # each run once


def test_a_filter_maps_onto_the_keywords_of_store_runs() -> None:
    assert RunFilter(workflow="checkout", key="k", ids=("a",)).keywords() == {
        "workflow": "checkout",
        "key": "k",
    }
    assert RunFilter().keywords() == {}
    assert RunFilter().empty
    assert not RunFilter(queue="emails").empty


def test_a_filter_says_what_it_names_in_a_line() -> None:
    assert RunFilter().describe() == "every run"
    assert RunFilter(workflow="checkout", status=RunStatus.FAILED).describe() == (
        "workflow=checkout status=failed"
    )
    assert RunFilter(since=AT).describe() == "since=2026-11-27T10:00:00+00:00"
    assert RunFilter(ids=("a", "b", "c", "d")).describe() == "ids=a,b,c,… (4 runs)"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"workflow": ""}, "the filter's workflow must be a non-empty string"),
        ({"key": "a\nb"}, "the filter's key cannot hold a control character"),
        ({"status": "lost"}, "the filter's status 'lost' is not a run status"),
        ({"until": AT.replace(tzinfo=None)}, "the filter's until must be a time with its time"),
        ({"since": AT, "until": AT}, "is not before its until"),
        ({"ids": ("a/b",)}, "a run's id cannot hold '/'"),
        ({"ids": tuple(str(n) for n in range(1001))}, "1 to 1000 runs by id, not 1001"),
    ],
)
def test_a_filter_refuses_what_cannot_be_meant(given: dict[str, object], message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        RunFilter(**given)  # type: ignore[arg-type]


def test_each_action_fits_the_statuses_a_person_would_use_it_on() -> None:
    assert acts_on(BulkAction.RETRY) == PARKED
    assert acts_on(BulkAction.RESTART) == FINAL
    assert acts_on(BulkAction.RESUME) == {RunStatus.PAUSED}
    assert acts_on(BulkAction.PAUSE) == {RunStatus.PENDING, RunStatus.RUNNING}
    assert RunStatus.COMPENSATION_FAILED not in acts_on(BulkAction.CANCEL)
    assert refusal(BulkAction.CANCEL, RunStatus.RUNNING) is None
    assert refusal(BulkAction.RESUME, RunStatus.PENDING) == (
        "it is pending: a resume acts on runs that are paused"
    )


def test_the_same_action_and_filter_make_the_same_fingerprint() -> None:
    job = NewBulkJob("bulk-1", BulkAction.CANCEL, RunFilter(workflow="w"), "erin", Via.CLI)

    assert replace(job, id="bulk-2", reason="why", via=Via.API).fingerprint == job.fingerprint
    assert replace(job, action=BulkAction.PAUSE).fingerprint != job.fingerprint
    assert replace(job, filter=RunFilter(workflow="v")).fingerprint != job.fingerprint


def test_a_jobs_progress_and_a_dry_runs_counts() -> None:
    job = BulkJob(
        "bulk-1",
        BulkAction.CANCEL,
        RunFilter(workflow="w"),
        "erin",
        Via.CLI,
        None,
        AT,
        AT,
        None,
        total=10,
        acted=6,
        skipped=1,
    )

    assert (job.done, job.pending, job.finished, job.state) == (7, 3, False, "running")
    assert replace(job, finished_at=AT).state == "finished"
    found = Matching({RunStatus.PENDING: 3, RunStatus.COMPLETED: 2}, ["a", "b"])
    assert (found.total, found.fitting(BulkAction.CANCEL), found.fitting(BulkAction.RESTART)) == (
        5,
        3,
        2,
    )
