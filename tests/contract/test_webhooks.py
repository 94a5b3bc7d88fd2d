"""The Store contract for webhooks (durably.core.webhooks) and the change stream: a delivery is
made for each subscribed status change in the transaction of the change (so none for one that
rolled back), leased to one taker at a time, settled, listed dead, and retried; every status
change reaches a listener of another store object (another process). Each test runs on both
real stores, plain and encrypted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durably.codec.encryption import sealed_key
from durably.core.status import RunStatus
from durably.core.webhooks import (
    DeliveryState,
    NewWebhook,
    Settlement,
    WebhookKind,
)
from durably.stores import Store, open_store
from durably.stores.encrypted import EncryptedStore
from durably.stores.webhooks import Retried
from durably.testing import FakeClock

from .support import checkpoint, claim_only, execute_sql, new_run, status_changes

WAIT = 20  # seconds a change may take to be heard before the test calls it missing
SEND_LEASE = timedelta(seconds=60)


def _hook(
    hook_id: str = "wh_a",
    kinds: tuple[WebhookKind, ...] = (WebhookKind.RUN_COMPLETED,),
    **given: Any,
) -> NewWebhook:
    return NewWebhook(hook_id, "http://127.0.0.1:9/hook", kinds, **given)


def _finish(store: Store, clock: FakeClock, run_id: str, status: RunStatus, **kwargs: Any) -> None:
    """Start `run_id`, claim it and commit its end in `status`."""
    store.create_run(new_run(run_id, **kwargs), now=clock.now())
    claim = claim_only(store, clock, run_id, **kwargs)
    assert store.commit([checkpoint(claim, status=status)], now=clock.now()) == [True]


def test_a_webhook_is_listed_without_its_secret(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    made = store.add_webhook(_hook(secret="s3cret", attempts=3), now=clock.now())
    store.add_webhook(_hook("wh_b", (WebhookKind.RUN_FAILED,), workflow="other"), now=clock.now())

    listed = store.webhooks()

    assert listed[0] == made
    assert [(h.id, h.signed, h.workflow, h.attempts) for h in listed] == [
        ("wh_a", True, None, 3),
        ("wh_b", False, "other", 8),
    ]
    assert "s3cret" not in repr(listed)
    [(stored,)] = execute_sql(store_url, "SELECT secret FROM durably_webhooks WHERE id = 'wh_a'")
    if isinstance(store, EncryptedStore):  # sealed at rest
        assert sealed_key(stored) == "k1"
    assert store.remove_webhook("wh_a") is True
    assert store.remove_webhook("wh_a") is False
    assert [hook.id for hook in store.webhooks()] == ["wh_b"]


def test_a_subscribed_end_makes_one_delivery_per_matching_webhook(
    store: Store, clock: FakeClock
) -> None:
    store.add_webhook(_hook("wh_all", tuple(WebhookKind)), now=clock.now())
    store.add_webhook(_hook("wh_done"), now=clock.now())
    store.add_webhook(_hook("wh_other", tuple(WebhookKind), workflow="other"), now=clock.now())
    store.add_webhook(_hook("wh_parked", (WebhookKind.NEEDS_ATTENTION,)), now=clock.now())

    _finish(store, clock, "ok", RunStatus.COMPLETED)
    clock.advance("1s")
    _finish(store, clock, "late", RunStatus.TIMED_OUT)
    _finish(store, clock, "stuck", RunStatus.COMPENSATION_FAILED)

    made = sorted((d.webhook, d.run_id, d.kind, d.status) for d in store.deliveries())
    assert made == [
        ("wh_all", "late", WebhookKind.RUN_FAILED, "timed_out"),
        ("wh_all", "ok", WebhookKind.RUN_COMPLETED, "completed"),
        ("wh_all", "stuck", WebhookKind.NEEDS_ATTENTION, "compensation_failed"),
        ("wh_done", "ok", WebhookKind.RUN_COMPLETED, "completed"),
        ("wh_parked", "stuck", WebhookKind.NEEDS_ATTENTION, "compensation_failed"),
    ]
    [ok] = store.deliveries(webhook="wh_done")
    assert (ok.state, ok.attempts, ok.workflow) == (DeliveryState.DUE, 0, "send_invoice")
    assert ok.at == ok.due_at == clock.now() - timedelta(seconds=1)  # the change's own time
    assert store.due_deliveries(now=clock.now()) == 5


def test_no_delivery_without_a_subscription_or_for_an_unsubscribed_change(
    store: Store, clock: FakeClock
) -> None:
    _finish(store, clock, "before", RunStatus.COMPLETED)  # nothing subscribed yet
    store.add_webhook(_hook(kinds=(WebhookKind.RUN_CANCELLED,)), now=clock.now())
    _finish(store, clock, "done", RunStatus.COMPLETED)
    store.create_run(new_run("waits"), now=clock.now())
    claim = claim_only(store, clock, "waits")  # pending -> running: no kind stands for it
    store.commit([checkpoint(claim, status=RunStatus.PENDING)], now=clock.now())

    assert store.deliveries() == []
    assert store.due_deliveries(now=clock.now()) == 0


def test_a_status_change_that_rolls_back_makes_no_delivery(store: Store, clock: FakeClock) -> None:
    store.add_webhook(_hook(), now=clock.now())
    store.create_run(new_run("r"), now=clock.now())
    claim = claim_only(store, clock, "r")

    def refuse() -> None:
        raise RuntimeError("the commit fails after the run's end was written")

    with pytest.raises(RuntimeError):
        store.transact(
            claim.lease,
            lambda db: checkpoint(claim, status=RunStatus.COMPLETED),
            now=clock.now(),
            committing=refuse,
        )

    assert store.get_run("r").status == RunStatus.RUNNING  # type: ignore[union-attr]
    assert store.deliveries() == []
    assert store.transact(
        claim.lease, lambda db: checkpoint(claim, status=RunStatus.COMPLETED), now=clock.now()
    )
    assert [d.run_id for d in store.deliveries()] == ["r"]  # the one that committed


def test_a_delivery_is_leased_to_one_taker_until_its_lease_ends(
    store: Store, other: Store, clock: FakeClock
) -> None:
    store.add_webhook(_hook(secret="k"), now=clock.now())
    _finish(store, clock, "r", RunStatus.COMPLETED)

    [taken] = store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10)
    assert (taken.url, taken.secret, taken.max_attempts) == ("http://127.0.0.1:9/hook", "k", 8)
    assert other.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10) == []
    assert store.due_deliveries(now=clock.now()) == 0  # leased: not waiting
    clock.advance(SEND_LEASE)
    [again] = other.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10)
    assert again.delivery.id == taken.delivery.id  # the first taker died: sent again


def test_settling_records_each_attempt_until_delivered_or_dead(
    store: Store, clock: FakeClock
) -> None:
    store.add_webhook(_hook(attempts=2), now=clock.now())
    _finish(store, clock, "r", RunStatus.COMPLETED)
    [first] = store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10)
    delivery_id = first.delivery.id
    retry_at = clock.now() + timedelta(seconds=30)

    failed = Settlement(delivery_id, 1, "HTTP 500", retry_at)
    assert store.settle_deliveries([failed], now=clock.now()) == [True]
    fenced = Settlement(delivery_id, 1)  # this attempt is recorded already
    assert store.settle_deliveries([fenced], now=clock.now()) == [False]
    [due] = store.deliveries()
    assert (due.state, due.attempts, due.due_at, due.last_error) == (
        DeliveryState.DUE,
        1,
        retry_at,
        "HTTP 500",
    )
    assert store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10) == []
    clock.advance("30s")
    assert len(store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10)) == 1
    timed_out = Settlement(delivery_id, 2, "timed out")  # no retry: dead
    assert store.settle_deliveries([timed_out], now=clock.now()) == [True]

    [dead] = store.deliveries(dead=True)
    assert (dead.state, dead.attempts, dead.due_at, dead.last_error) == (
        DeliveryState.DEAD,
        2,
        None,
        "timed out",
    )
    assert store.retry_delivery(delivery_id, now=clock.now()) is Retried.RETRIED
    assert store.deliveries(dead=True) == []
    [back] = store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10)
    assert back.delivery.attempts == 0
    assert store.retry_delivery(delivery_id, now=clock.now()) is Retried.NOT_DEAD
    assert store.settle_deliveries([Settlement(delivery_id, 1)], now=clock.now()) == [True]
    [done] = store.deliveries()
    assert (done.state, done.delivered_at, done.due_at) == (
        DeliveryState.DELIVERED,
        clock.now(),
        None,
    )
    assert store.retry_delivery(delivery_id, now=clock.now()) is Retried.NOT_DEAD
    assert store.retry_delivery(delivery_id + 1000, now=clock.now()) is Retried.NO_DELIVERY


def test_removing_a_webhook_stops_its_deliveries(store: Store, clock: FakeClock) -> None:
    store.add_webhook(_hook(), now=clock.now())
    _finish(store, clock, "r", RunStatus.COMPLETED)
    store.remove_webhook("wh_a")
    _finish(store, clock, "s", RunStatus.COMPLETED)

    assert store.deliveries() == []
    assert store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10) == []


def test_every_status_change_reaches_a_listener_of_another_store(
    store: Store, other: Store, clock: FakeClock
) -> None:

    def start_and_fail() -> None:
        store.create_run(new_run("r"), now=clock.now())
        claim = claim_only(store, clock, "r")
        clock.advance("2s")
        store.commit([checkpoint(claim, status=RunStatus.FAILED)], now=clock.now())

    changes = status_changes(other, start_and_fail, 2, wait=WAIT)

    assert [(c.run, c.workflow, c.status) for c in changes] == [
        ("r", "send_invoice", "running"),
        ("r", "send_invoice", "failed"),
    ]
    assert changes[1].at == clock.now()


@pytest.mark.postgres
def test_the_postgres_change_stream_is_off_until_turned_on(postgres_url: str) -> None:
    store = open_store(postgres_url)
    try:
        assert store.set_status_changes() is False
        assert store.set_status_changes(True) is True
        assert store.set_status_changes() is True
        assert store.set_status_changes(True) is True
        assert store.set_status_changes(False) is False
        assert store.set_status_changes() is False
    finally:
        store.close()


def test_sqlite_change_stream_cannot_be_turned_off(sqlite_url: str) -> None:
    from durably.errors import ConfigError

    store = open_store(sqlite_url)
    try:
        assert store.set_status_changes() is True
        with pytest.raises(ConfigError, match="costs nothing while nobody listens"):
            store.set_status_changes(False)
    finally:
        store.close()


def test_pruning_a_run_deletes_its_delivered_deliveries_only(
    store: Store, clock: FakeClock
) -> None:
    store.add_webhook(_hook(attempts=1), now=clock.now())
    _finish(store, clock, "sent", RunStatus.COMPLETED)
    _finish(store, clock, "dead", RunStatus.COMPLETED)
    taken = {
        t.delivery.run_id: t
        for t in store.take_deliveries(now=clock.now(), lease=SEND_LEASE, limit=10)
    }
    sent, dead = (
        Settlement(taken["sent"].delivery.id, 1),
        Settlement(taken["dead"].delivery.id, 1, "x"),
    )
    assert store.settle_deliveries([sent, dead], now=clock.now()) == [True, True]
    clock.advance("1d")

    assert store.prune(clock.now(), limit=10) == 2

    assert [(d.run_id, d.state) for d in store.deliveries()] == [("dead", DeliveryState.DEAD)]


def test_sqlite_has_its_notices_trigger_only_while_a_webhook_exists(
    sqlite_url: str, clock: FakeClock
) -> None:
    def triggers() -> list[tuple[str]]:
        return execute_sql(sqlite_url, "SELECT name FROM sqlite_master WHERE type = 'trigger'")

    store = open_store(sqlite_url)
    try:
        assert triggers() == []  # nothing to pay for on each run's end
        store.add_webhook(_hook("wh_a"), now=clock.now())
        store.add_webhook(_hook("wh_b"), now=clock.now())
        assert triggers() == [("durably_runs_notices",)]
        store.remove_webhook("wh_a")
        assert triggers() == [("durably_runs_notices",)]
        store.remove_webhook("wh_b")
        assert triggers() == []
    finally:
        store.close()
