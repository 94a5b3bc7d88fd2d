"""Approvals: durably.approval in a workflow; operators decide by run and name, holders of a
token by the token. On both stores, on the fake clock: the waiting run is parked and holds
nothing, the notify step gets a single-use token whose hash alone is stored, reminders go out
with fresh tokens, the timeout rejects, approves or escalates by itself, and a decision lands
once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import ApprovalRequest, Decision, RunStatus
from durably.core.history import EventKind
from durably.errors import DurablyError, NotInWorkflow, RunNotFound
from durably.testing import FakeClock

from .conftest import kinds


def refund_app(app: durably.App, sent: list[ApprovalRequest], **options: Any) -> None:
    @app.step
    async def email_manager(request: ApprovalRequest) -> None:
        sent.append(request)

    @app.step
    async def refund(order: str, amount: int) -> str:
        return f"refunded {amount} for {order}"

    @app.workflow
    async def refund_flow(order: str, amount: int) -> str:
        decision = await durably.approval(
            "refund", notify=email_manager, details={"order": order, "amount": amount}, **options
        )
        if not decision.approved:
            return f"refused by {decision.by} ({decision.via})"
        return await refund(order, amount)  # type: ignore[no-any-return]


def test_an_operator_approves_and_the_run_goes_on(app: durably.App, clock: FakeClock) -> None:
    sent: list[ApprovalRequest] = []
    refund_app(app, sent, timeout="2d")
    handle = app.start("refund_flow", "o-1", 120, id="r-1")
    assert app.run_until_idle() == 0
    run = app.client.get("r-1")
    assert run.status is RunStatus.NEEDS_ATTENTION  # a person must act
    assert run.available_at == clock.now() + timedelta(days=2)  # its timeout wakes it
    assert run.lease_owner is None
    [request] = sent
    assert (request.run_id, request.name, request.notice) == ("r-1", "refund", 0)
    assert request.details == {"order": "o-1", "amount": 120}
    assert request.on_timeout == "reject"

    [pending] = app.client.approvals()
    assert (pending.run_id, pending.workflow, pending.name) == ("r-1", "refund_flow", "refund")
    assert pending.until == clock.now() + timedelta(days=2)
    assert app.client.dead_letters() == []  # an approval is not a failure

    decision = app.client.decide("r-1", "refund", by="maria", comment="fine", approved=True)
    assert (decision.approved, decision.by, decision.via, decision.comment) == (
        True,
        "maria",
        "person",
        "fine",
    )
    assert app.client.get("r-1").status is RunStatus.PENDING
    app.run_until_idle()
    assert handle.result(timeout=0) == "refunded 120 for o-1"
    assert app.client.approvals() == []
    events = kinds(app.client.history("r-1"))
    for kind in ("approval_requested", "approval_token", "approval_decided"):
        assert kind in events


def test_the_token_decides_once_and_only_its_hash_is_stored(
    app: durably.App, clock: FakeClock
) -> None:
    sent: list[ApprovalRequest] = []
    refund_app(app, sent)
    handle = app.start("refund_flow", "o-2", 80, id="r-2")
    app.run_until_idle()
    [request] = sent
    secret = request.token.rpartition(".")[2]
    assert len(secret) >= 43  # 256 bits, url-safe base64
    stored = "".join(f"{e.data}" for e in app.client.history("r-2"))
    assert secret not in stored  # not in the notify step's recorded input, nowhere
    assert "[redacted]" in stored

    with pytest.raises(DurablyError, match="does not match"):
        app.client.decide_with_token(request.token[:-2] + "xx", approved=True, by="mallory")
    assert app.client.get("r-2").status is RunStatus.NEEDS_ATTENTION  # untouched by it

    decision = app.client.decide_with_token(request.token, approved=False, by="sam")
    assert (decision.approved, decision.via) == (False, "token")
    with pytest.raises(DurablyError, match="already decided: rejected by sam"):
        app.client.decide_with_token(request.token, approved=True, by="sam")
    with pytest.raises(DurablyError, match="already decided"):
        app.client.decide("r-2", "refund", by="maria", approved=True)
    app.run_until_idle()
    assert handle.result(timeout=0) == "refused by sam (token)"


def test_reminders_carry_fresh_tokens_that_all_stay_good(
    app: durably.App, clock: FakeClock
) -> None:
    sent: list[ApprovalRequest] = []
    refund_app(app, sent, timeout="3d", remind_after="1d")
    handle = app.start("refund_flow", "o-3", 10, id="r-3")
    app.run_until_idle()
    assert app.client.get("r-3").available_at == clock.now() + timedelta(days=1)  # the reminder
    clock.advance(timedelta(days=1))
    app.run_until_idle()
    assert [request.notice for request in sent] == [0, 1]
    assert sent[0].token != sent[1].token
    assert app.client.get("r-3").status is RunStatus.NEEDS_ATTENTION
    app.client.decide_with_token(sent[0].token, approved=True, by="first-email")  # the older one
    app.run_until_idle()
    assert handle.result(timeout=0) == "refunded 10 for o-3"


@pytest.mark.parametrize(
    ("on_timeout", "result"),
    [("reject", "refused by durably (timeout)"), ("approve", "refunded 5 for o-4")],
)
def test_the_timeout_decides_when_nobody_does(
    app: durably.App, clock: FakeClock, on_timeout: str, result: str
) -> None:
    sent: list[ApprovalRequest] = []
    refund_app(app, sent, timeout="2d", on_timeout=on_timeout)
    handle = app.start("refund_flow", "o-4", 5, id="r-4")
    app.run_until_idle()
    clock.advance(timedelta(days=2))
    assert app.run_until_idle() == 1  # woken by its timeout alone
    assert handle.result(timeout=0) == result
    [decided] = [e for e in app.client.history("r-4") if e.kind is EventKind.APPROVAL_DECIDED]
    assert decided.at == clock.now()


def test_escalate_on_timeout_waits_for_a_person_without_a_timeout(
    app: durably.App, clock: FakeClock
) -> None:
    sent: list[ApprovalRequest] = []
    refund_app(app, sent, timeout="1h", on_timeout="escalate")
    handle = app.start("refund_flow", "o-5", 7, id="r-5")
    app.run_until_idle()
    clock.advance(timedelta(hours=1))
    app.run_until_idle()
    run = app.client.get("r-5")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.available_at is None  # nothing but a person ends it now
    assert [(request.notice, request.escalated) for request in sent] == [(0, False), (1, True)]
    assert sent[1].until is None
    [pending] = app.client.approvals()
    assert pending.escalated
    assert pending.until is None
    assert "escalated" in (run.error.message if run.error else "")
    app.client.decide("r-5", "refund", by="lead", approved=False)
    app.run_until_idle()
    assert handle.result(timeout=0) == "refused by lead (person)"


def test_the_workflow_deadline_ends_a_wait_for_a_person(app: durably.App, clock: FakeClock) -> None:
    @app.workflow(deadline="1d")
    async def slow_approval() -> bool:
        decision = await durably.approval("go")
        return decision.approved

    handle = app.start(slow_approval, id="r-6")
    app.run_until_idle()
    assert app.client.get("r-6").available_at == clock.now() + timedelta(days=1)
    clock.advance(timedelta(days=1))
    app.run_until_idle()
    assert app.client.get("r-6").status is RunStatus.TIMED_OUT
    with pytest.raises(durably.WorkflowFailed):
        handle.result(timeout=0)


def test_a_sync_workflow_waits_for_an_approval_too(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    def sync_flow() -> str:
        decision: Decision = durably.approval("ship", timeout="1h")
        return "yes" if decision.approved else "no"

    handle = app.start(sync_flow, id="r-7")
    app.run_until_idle()
    assert app.client.get("r-7").status is RunStatus.NEEDS_ATTENTION
    app.client.decide("r-7", "ship", by="ops", approved=True)
    app.run_until_idle()
    assert handle.result(timeout=0) == "yes"


def test_escalations_are_in_the_same_list_and_answered_through_it(
    app: durably.App, clock: FakeClock
) -> None:
    @app.workflow
    async def vip(guest: str) -> str:
        answer = await durably.escalate(f"is {guest} a VIP?")
        return f"{guest}: {answer}"

    handle = app.start(vip, "ada", id="r-8")
    app.run_until_idle()
    [pending] = app.client.approvals()
    assert (pending.run_id, pending.name) == ("r-8", "durably.escalate")
    assert "is ada a VIP?" in (pending.details or "")
    app.client.decide("r-8", "durably.escalate", by="host", approved=True)
    app.run_until_idle()
    assert handle.result(timeout=0) == "ada: True"


def test_bad_decisions_and_calls_are_refused_clearly(app: durably.App, clock: FakeClock) -> None:
    sent: list[ApprovalRequest] = []
    refund_app(app, sent)
    app.start("refund_flow", "o-9", 1, id="r-9")
    app.run_until_idle()
    with pytest.raises(RunNotFound):
        app.client.decide("nope", "refund", approved=True)
    with pytest.raises(DurablyError, match="has no approval 'other'"):
        app.client.decide("r-9", "other", approved=True)
    with pytest.raises(DurablyError, match="not an approval token"):
        app.client.decide_with_token("garbage", approved=True)
    with pytest.raises(NotInWorkflow):
        durably.approval("outside")

    @app.workflow
    async def bad_option() -> None:
        await durably.approval("x", on_timeout="ignore")

    app.start(bad_option, id="r-10")
    app.run_until_idle()
    error = app.client.get("r-10").error
    assert error is not None
    assert "on_timeout" in error.message


def test_a_notify_step_that_is_retried_gets_a_fresh_token_and_the_first_stays_good(
    app: durably.App, clock: FakeClock
) -> None:
    tokens: list[str] = []

    @app.step(retry=durably.Retry(attempts=3, initial="1s", jitter="none"))
    async def flaky_mail(request: ApprovalRequest) -> None:
        tokens.append(request.token)
        if len(tokens) == 1:
            raise ConnectionError("the mail server hung up after taking the message")

    @app.workflow
    async def ask() -> bool:
        decision = await durably.approval("go", notify=flaky_mail)
        return decision.approved

    handle = app.start(ask, id="r-11")
    app.run_until_idle()
    clock.advance(timedelta(seconds=1))
    app.run_until_idle()
    assert len(tokens) == 2
    assert tokens[0] != tokens[1]
    history = app.client.history("r-11")
    assert kinds(history).count("approval_token") == 2
    app.client.decide_with_token(tokens[0], approved=True, by="reader-of-the-first-mail")
    app.run_until_idle()
    assert handle.result(timeout=0) is True


def test_decisions_reach_only_runs_that_wait_for_them(app: durably.App, clock: FakeClock) -> None:
    tokens: list[str] = []

    @app.step(retry=durably.Retry(attempts=1))
    async def charge() -> int:
        raise ConnectionError("payments are down")

    @app.workflow
    async def pays() -> int:
        return await charge()  # type: ignore[no-any-return]

    @app.step(retry=durably.Retry(attempts=1))
    async def broken_mail(request: ApprovalRequest) -> None:
        tokens.append(request.token)
        raise ConnectionError(f"could not send {request.token}")

    @app.step
    async def untyped_mail(request) -> None:  # type: ignore[no-untyped-def]
        pass

    @app.workflow
    async def asks(untyped: bool) -> bool:
        notify = untyped_mail if untyped else broken_mail
        decision = await durably.approval("go", notify=notify)
        return decision.approved

    app.start(pays, id="r-12")
    app.start(asks, False, id="r-13")
    app.start(asks, True, id="r-14")
    app.run_until_idle()
    # a run parked on an ordinary step is no escalation: its step keeps its failure
    with pytest.raises(
        DurablyError, match=r"waits for no escalation \(it is parked on step 'charge'\)"
    ):
        app.client.decide("r-12", "durably.escalate", approved=True)
    # the notify step failed for good: the run is a dead letter, its approval not decidable
    assert {letter.run_id for letter in app.client.dead_letters()} == {"r-12", "r-13"}
    with pytest.raises(DurablyError, match="parked needs_attention by a failure"):
        app.client.decide("r-13", "go", approved=True)

    [token] = tokens
    secret = token.rpartition(".")[2]
    error = app.client.get("r-13").error
    assert error is not None
    assert "could not send r-13.0.[redacted]" in error.message  # its own message, without it
    assert secret not in "".join(str(e.data) for e in app.client.history("r-13"))
    run = app.client.get("r-14")  # a request it cannot take fails the run (terminal)
    error = run.error
    assert run.status is RunStatus.FAILED
    assert error is not None
    assert "annotate its parameter as durably.ApprovalRequest" in error.message
    assert "ApprovalRequest(" not in error.message  # no repr of the request, token and all
