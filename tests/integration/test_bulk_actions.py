"""Bulk actions through the client (app.client.bulk), on both stores and the fake clock: every
run a filter matches is cancelled, retried, paused, resumed or restarted, each once, each
recorded in its history with who acted and in the audit trail as an action of the job; runs
the action does not fit are skipped with why; a dry run changes nothing; a filter with no
match makes no job; a job stopped half-way is resumed, by its id or by the same command
again, without acting twice on a run."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.client import control
from durably.core.audit import AuditEntry, Via
from durably.core.bulk import BulkAction, RunFilter
from durably.core.control import CANCEL
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import MessageReceived, RunStarted
from durably.errors import PayloadError, UnknownBulkJob
from durably.testing import FakeClock

from .conftest import events

WAITING = RunFilter(workflow="waiting")


@pytest.fixture
def broken() -> list[bool]:
    """Whether the charge step fails: [True] until a test fixes it."""
    return [True]


@pytest.fixture
def shop(app: durably.App, broken: list[bool]) -> durably.App:
    @app.workflow
    async def waiting(order: str) -> str:
        await durably.wait_for_signal("go")
        return order

    @app.step(retry=Retry(attempts=1))
    async def charge(order: str) -> str:
        if broken[0]:
            raise ConnectionError("payments unreachable")
        return f"ch-{order}"

    @app.workflow
    async def checkout(order: str) -> str:
        return await charge(order)  # type: ignore[no-any-return]

    return app


def start_waiting(app: durably.App, *run_ids: str) -> None:
    for run_id in run_ids:
        app.start("waiting", run_id, id=run_id)
    app.run_until_idle()


def trail(app: durably.App, action: str) -> list[AuditEntry]:
    return [e for e in app.client.audit(limit=1000).entries if e.action == action]


def cancels_received(app: durably.App, run_id: str) -> list[MessageReceived]:
    received = [
        read_payload(e, MessageReceived) for e in events(app, run_id, EventKind.MESSAGE_RECEIVED)
    ]
    return [message for message in received if message.kind == CANCEL]


def test_a_bulk_cancel_cancels_each_matching_run_once_and_says_who(shop: durably.App) -> None:
    start_waiting(shop, "w1", "w2", "w3")
    shop.client.signal("w3", "go")
    shop.run_until_idle()  # w3 completed: a cancel does not fit it
    shop.start("checkout", "c1", id="c1")  # another workflow: not selected

    job = shop.client.bulk.act("cancel", WAITING, by="ops", reason="stock recall")
    shop.run_until_idle()

    assert job is not None
    assert (job.action, job.total, job.acted, job.skipped, job.finished) == (
        BulkAction.CANCEL,
        3,
        2,
        1,
        True,
    )
    assert [shop.client.get(r).status for r in ("w1", "w2", "w3")] == [
        RunStatus.CANCELLED,
        RunStatus.CANCELLED,
        RunStatus.COMPLETED,
    ]
    for run_id in ("w1", "w2"):
        [received] = cancels_received(shop, run_id)
        assert received.sender == "ops"  # who acted, in the run's history
        assert json.loads(received.data or "null") == "stock recall"
    entries = trail(shop, "cancel")
    assert sorted((e.run_id, e.by, e.via) for e in entries) == [
        ("w1", "ops", "library"),
        ("w2", "ops", "library"),
    ]
    assert {json.loads(e.detail or "{}")["job"] for e in entries} == {job.id}
    [skipped] = shop.client.bulk.skipped(job.id)
    assert skipped.run_id == "w3"
    assert skipped.note == (
        "it is completed: a cancel acts on runs that are pending, running, needs_attention, paused"
    )


def test_parked_runs_are_retried_in_bulk(shop: durably.App, broken: list[bool]) -> None:
    for run_id in ("c1", "c2"):
        shop.start("checkout", run_id, id=run_id)
    shop.run_until_idle()
    assert shop.client.get("c1").status is RunStatus.NEEDS_ATTENTION
    start_waiting(shop, "w1")
    broken[0] = False  # the fault is fixed

    job = shop.client.bulk.act("retry", RunFilter(status=RunStatus.NEEDS_ATTENTION), by="ops")
    shop.run_until_idle()

    assert job is not None
    assert (job.total, job.acted, job.skipped) == (2, 2, 0)
    assert [shop.client.get(r).result for r in ("c1", "c2")] == ['"ch-c1"', '"ch-c2"']
    assert sorted(e.run_id or "" for e in trail(shop, "retry")) == ["c1", "c2"]
    assert shop.client.get("w1").status is RunStatus.PENDING  # not selected


def test_runs_are_paused_and_resumed_in_bulk(shop: durably.App) -> None:
    start_waiting(shop, "w1", "w2")

    paused = shop.client.bulk.act("pause", WAITING, by="ops", reason="audit")
    shop.run_until_idle()
    assert paused is not None
    assert paused.acted == 2
    assert {shop.client.get(r).status for r in ("w1", "w2")} == {RunStatus.PAUSED}

    again = shop.client.bulk.act("pause", WAITING, by="ops", reason="audit")
    assert again is not None
    assert (again.acted, again.skipped) == (0, 2)

    resumed = shop.client.bulk.act("resume", WAITING, by="ops")
    shop.run_until_idle()
    assert resumed is not None
    assert resumed.acted == 2
    assert {shop.client.get(r).status for r in ("w1", "w2")} == {RunStatus.PENDING}
    assert len(trail(shop, "pause")) == 2
    assert len(trail(shop, "resume")) == 2


def test_ended_runs_are_restarted_in_bulk(shop: durably.App, broken: list[bool]) -> None:
    start_waiting(shop, "w1", "w2")
    shop.client.bulk.act("cancel", WAITING, by="ops")
    shop.run_until_idle()

    job = shop.client.bulk.act("restart", RunFilter(status=RunStatus.CANCELLED), by="ops")
    shop.run_until_idle()

    assert job is not None
    assert job.acted == 2
    for run_id in ("w1", "w2"):
        restarted = shop.client.get(f"{run_id}.restart-1")
        assert restarted.status is RunStatus.PENDING  # waits for its signal again
        first = read_payload(shop.client.history(restarted.id)[0], RunStarted)
        assert (first.restarted_from, first.by) == (run_id, "ops")
    details = [json.loads(e.detail or "{}") for e in trail(shop, "restart")]
    assert {d["job"] for d in details} == {job.id}


def test_a_dry_run_changes_nothing(shop: durably.App) -> None:
    start_waiting(shop, "w3", "w1", "w2")
    shop.client.signal("w3", "go")
    shop.run_until_idle()

    found = shop.client.bulk.preview("cancel", WAITING, limit=2)

    assert (found.total, found.fitting(BulkAction.CANCEL), found.first) == (3, 2, ["w1", "w2"])
    assert shop.client.bulk.jobs() == []
    assert [e.action for e in shop.client.audit().entries] == ["signal"]  # w3's, no more
    assert {shop.client.get(r).status for r in ("w1", "w2")} == {RunStatus.PENDING}
    assert shop.store.mail(["w1", "w2"]) == {}


def test_a_filter_with_no_match_makes_no_job(shop: durably.App) -> None:
    start_waiting(shop, "w1")

    begun = shop.client.bulk.begin("cancel", RunFilter(workflow="waiting", key="nobody"))

    assert (begun.job, begun.resumed) == (None, False)
    assert shop.client.bulk.act("cancel", RunFilter(workflow="checkout")) is None
    assert shop.client.bulk.jobs() == []


def test_acting_on_every_run_must_be_said(shop: durably.App) -> None:
    start_waiting(shop, "w1")

    with pytest.raises(PayloadError, match="the filter names no runs, so a cancel would act on"):
        shop.client.bulk.begin("cancel", RunFilter())
    job = shop.client.bulk.act("cancel", RunFilter(), every=True)
    assert job is not None
    assert job.acted == 1


def test_bad_requests_are_refused_by_name(shop: durably.App, clock: FakeClock) -> None:
    with pytest.raises(PayloadError, match="'delete' is not an action on runs in bulk"):
        shop.client.bulk.begin("delete", WAITING)
    with pytest.raises(PayloadError, match="a retry takes no reason"):
        shop.client.bulk.begin("retry", WAITING, reason="why not")
    with pytest.raises(PayloadError, match="the filter's status 'lost' is not a run status"):
        RunFilter(status="lost")  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="the filter's since must be a time with its time"):
        RunFilter(since=clock.now().replace(tzinfo=None))
    with pytest.raises(PayloadError, match="is not before its until"):
        RunFilter(since=clock.now(), until=clock.now() - timedelta(hours=1))
    with pytest.raises(PayloadError, match="a filter names 1 to 1000 runs by id, not 0"):
        RunFilter(ids=())
    with pytest.raises(UnknownBulkJob, match="no bulk job has the id 'bulk-nope'"):
        shop.client.bulk.run("bulk-nope")


def test_a_job_stopped_half_way_is_resumed_by_the_same_command(shop: durably.App) -> None:
    start_waiting(shop, *(f"w{n}" for n in range(7)))
    begun = shop.client.bulk.begin("pause", WAITING, by="ops")
    assert begun.job is not None
    assert not begun.resumed
    seen: list[int] = []
    asked = iter(range(100))

    stopped = shop.client.bulk.run(
        begun.job.id,
        batch=2,
        progress=lambda job: seen.append(job.done),
        stop=lambda: next(asked) >= 3,
    )

    assert (stopped.done, stopped.finished, seen) == (2, False, [2])
    again = shop.client.bulk.begin("pause", WAITING, by="ops")  # the same command again
    assert again.job is not None
    assert (again.job.id, again.resumed) == (begun.job.id, True)
    assert shop.client.bulk.begin("pause", WAITING, by="sam").resumed is False  # another's
    finished = shop.client.bulk.run(again.job.id, batch=2, progress=lambda j: seen.append(j.done))
    shop.run_until_idle()

    assert (finished.total, finished.acted, finished.finished) == (7, 7, True)
    assert seen == [2, 4, 6, 7]
    by_ops = [e for e in trail(shop, "pause") if e.by == "ops"]
    assert sorted(e.run_id or "" for e in by_ops) == [f"w{n}" for n in range(7)]  # each once


def test_a_run_acted_on_before_a_crash_is_not_acted_on_again(shop: durably.App) -> None:
    start_waiting(shop, "w1", "w2")
    begun = shop.client.bulk.begin("pause", WAITING, by="ops")
    assert begun.job is not None
    # the job's first pause is stored, and the process dies before the batch is settled
    now = shop.clock.now()
    control.pause(shop.store, "w1", now=now, by="ops", reason=None, via=Via.CLI, job=begun.job.id)

    job = shop.client.bulk.run(begun.job.id)

    assert (job.acted, job.skipped) == (2, 0)
    assert len(shop.store.mail(["w1"])["w1"]) == 1  # one pause, not two
    assert sorted(e.run_id or "" for e in trail(shop, "pause")) == ["w1", "w2"]


def test_a_bulk_cancel_by_attribute_and_key_acts_on_those_runs_only(shop: durably.App) -> None:
    shop.client.start("waiting", ["a"], id="a", attributes={"customer": "42"}, key="c-42")
    shop.client.start("waiting", ["b"], id="b", attributes={"customer": "42"}, key="c-7")
    shop.client.start("waiting", ["c"], id="c", attributes={"customer": "7"}, key="c-42")

    chosen = RunFilter(attributes={"customer": "42"}, key="c-42")
    job = shop.client.bulk.act("cancel", chosen, by="ops")
    shop.run_until_idle()

    assert job is not None
    assert (job.total, job.acted) == (1, 1)
    assert [shop.client.get(r).status for r in ("a", "b", "c")] == [
        RunStatus.CANCELLED,
        RunStatus.PENDING,
        RunStatus.PENDING,
    ]
    assert "attributes" in job.filter.to_json()
