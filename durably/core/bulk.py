"""Bulk jobs: one person's action (cancel, retry, pause, resume, restart) on every run that
matches a filter.

A job selects its runs once, when it is made, so the set it acts on is fixed; then it acts
on them one by one, and settles each: acted on, or skipped with the reason (a run the action
does not fit, such as a cancel of a run that has finished, is skipped, not an error). A run
is acted on at most once by a job: the store records the run as acted on in the transaction
of the action's own write (its audit entry names the job), and refuses a second
(AlreadySettled), so a job resumed after a crash, or run by two processes at once, never
acts twice on a run. What is pure here: the filter, the statuses each action fits, and the
progress of a job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from durably.core.attributes import check_wanted
from durably.core.audit import Via
from durably.core.names import check_name, check_run_id
from durably.core.status import FINAL, PARKED, RunStatus
from durably.errors import DurablyError, PayloadError

__all__ = [
    "MAX_IDS",
    "AlreadySettled",
    "BulkAction",
    "BulkJob",
    "BulkRun",
    "Matching",
    "NewBulkJob",
    "Outcome",
    "RunFilter",
    "acts_on",
    "refusal",
]

MAX_IDS = 1000  # runs a filter may name by id (the dashboard's selection)


class BulkAction(StrEnum):
    CANCEL = "cancel"
    RETRY = "retry"
    PAUSE = "pause"
    RESUME = "resume"
    RESTART = "restart"

    @property
    def past(self) -> str:
        """The action done: cancelled, retried, paused, resumed, restarted."""
        return _PAST[self]


_PAST = {
    BulkAction.CANCEL: "cancelled",
    BulkAction.RETRY: "retried",
    BulkAction.PAUSE: "paused",
    BulkAction.RESUME: "resumed",
    BulkAction.RESTART: "restarted",
}


class Outcome(StrEnum):
    """How a job settled one of its runs (a run not settled yet has none)."""

    ACTED = "acted"
    SKIPPED = "skipped"


class AlreadySettled(DurablyError):
    """The job settled this run already (acted on it, or skipped it): the action's write was
    rolled back, so the run is not acted on twice."""


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a job acts on: each field that is set narrows the selection. Every field
    but `ids` is the keyword filter of Store.runs of the same name (`keywords()`), so a filter
    Store.runs learns is one more field here."""

    workflow: str | None = None
    status: RunStatus | None = None
    since: datetime | None = None  # started at or after it
    until: datetime | None = None  # started before it
    key: str | None = None
    queue: str | None = None  # durably.core.queues: "default" is the default queue
    attributes: Mapping[str, str] | None = None  # each must match (durably.core.attributes)
    ids: tuple[str, ...] | None = None  # only these runs (a selection made by hand)

    def __post_init__(self) -> None:
        for name in ("workflow", "key", "queue"):
            value = getattr(self, name)
            if value is not None:
                check_name(value, f"the filter's {name}")
        if self.status is not None:
            object.__setattr__(self, "status", _status(self.status))
        if self.attributes is not None:
            object.__setattr__(self, "attributes", check_wanted(self.attributes) or None)
        for name in ("since", "until"):
            moment = getattr(self, name)
            if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
                raise PayloadError(
                    f"the filter's {name} must be a time with its time zone "
                    f"(2026-11-27T10:00:00+00:00), not {moment!r}"
                )
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise PayloadError(
                f"the filter's since ({self.since.isoformat()}) is not before its until "
                f"({self.until.isoformat()}): no run could match"
            )
        if self.ids is not None:
            self._check_ids()

    def _check_ids(self) -> None:
        ids = tuple(dict.fromkeys(check_run_id(run_id) for run_id in self.ids or ()))
        if not ids or len(ids) > MAX_IDS:
            raise PayloadError(
                f"a filter names 1 to {MAX_IDS} runs by id, not {len(ids)}: "
                "for more, filter by workflow, status, time, key or queue"
            )
        object.__setattr__(self, "ids", ids)

    @property
    def empty(self) -> bool:
        """Whether it names nothing, and so matches every run."""
        return all(getattr(self, field.name) is None for field in fields(self))

    def keywords(self) -> dict[str, Any]:
        """The Store.runs keyword filters it sets (`ids` is not one)."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.name != "ids" and getattr(self, field.name) is not None
        }

    def to_json(self) -> str:
        """The filter as stored with its job: the fields set, sorted, times in ISO 8601."""
        return json.dumps(
            {name: _plain(value) for name, value in self._set().items()}, sort_keys=True
        )

    @classmethod
    def from_json(cls, text: str) -> RunFilter:
        given = json.loads(text)
        for name in ("since", "until"):
            if given.get(name) is not None:
                given[name] = datetime.fromisoformat(given[name])
        if given.get("ids") is not None:
            given["ids"] = tuple(given["ids"])
        return cls(**given)

    def describe(self) -> str:
        """In a line: `workflow=checkout status=failed`, or `every run`."""
        if self.empty:
            return "every run"
        parts = []
        for name, value in self._set().items():
            if name == "ids":
                shown = ",".join(value[:3]) + (f",… ({len(value)} runs)" if len(value) > 3 else "")
                parts.append(f"ids={shown}")
            else:
                parts.append(f"{name}={_plain(value)}")
        return " ".join(parts)

    def _set(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass(frozen=True, slots=True)
class NewBulkJob:
    """A job to make: `action` on the runs `filter` matches, by `by` through `via`."""

    id: str
    action: BulkAction
    filter: RunFilter
    by: str
    via: Via
    reason: str | None = None  # a cancel's or a pause's, recorded in each run's history

    @property
    def fingerprint(self) -> str:
        """What makes two jobs the same (with who acts): the action and the filter. An
        unfinished job of the same fingerprint and person is resumed, not made again."""
        text = f"{self.action}\n{self.filter.to_json()}"
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class BulkJob:
    """A job as the store keeps it, with its progress."""

    id: str
    action: BulkAction
    filter: RunFilter
    by: str
    via: Via
    reason: str | None
    created_at: datetime
    updated_at: datetime  # its last progress
    finished_at: datetime | None  # when its last run was settled (None: unfinished)
    total: int  # runs it selected when it was made
    acted: int
    skipped: int

    @property
    def done(self) -> int:
        """Runs settled so far: acted on or skipped."""
        return self.acted + self.skipped

    @property
    def pending(self) -> int:
        return self.total - self.done

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def state(self) -> str:
        return "finished" if self.finished else "running"


@dataclass(frozen=True, slots=True)
class BulkRun:
    """One run of a job: how it was settled (None: not yet), and why it was skipped."""

    run_id: str
    outcome: Outcome | None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Matching:
    """What a filter matches now (a dry run): how many runs, by status, and the first ids."""

    by_status: Mapping[RunStatus, int]
    first: list[str]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    def fitting(self, action: BulkAction) -> int:
        """How many of them `action` would act on (the others it would skip)."""
        return sum(n for status, n in self.by_status.items() if status in _ACTS_ON[action])


# The statuses each action fits; a run in another is skipped, saying which it is
_ACTS_ON: Mapping[BulkAction, frozenset[RunStatus]] = {
    BulkAction.CANCEL: frozenset(RunStatus) - FINAL - {RunStatus.COMPENSATION_FAILED},
    BulkAction.RETRY: PARKED,
    BulkAction.PAUSE: frozenset({RunStatus.PENDING, RunStatus.RUNNING}),
    BulkAction.RESUME: frozenset({RunStatus.PAUSED}),
    BulkAction.RESTART: FINAL,
}


def acts_on(action: BulkAction) -> frozenset[RunStatus]:
    """The statuses of the runs `action` acts on."""
    return _ACTS_ON[action]


def refusal(action: BulkAction, status: RunStatus) -> str | None:
    """Why `action` skips a run in `status`, or None if it fits."""
    fits = _ACTS_ON[action]
    if status in fits:
        return None
    names = ", ".join(str(s) for s in RunStatus if s in fits)
    return f"it is {status}: a {action} acts on runs that are {names}"


def _status(value: RunStatus | str) -> RunStatus:
    try:
        return RunStatus(value)
    except ValueError:
        known = ", ".join(RunStatus)
        raise PayloadError(f"the filter's status {value!r} is not a run status ({known})") from None


def _plain(value: Any) -> Any:
    """A filter's value as JSON holds it."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return str(value) if isinstance(value, StrEnum) else value
