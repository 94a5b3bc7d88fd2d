"""Webhook deliveries against a real HTTP server on 127.0.0.1 that fails (500), times out
(answers after the sender's timeout), then recovers: the delivery arrives once it does,
signed, its retries spaced by the backoff; a delivery whose every attempt failed is dead and
a person's retry sends it again; a worker SIGKILLed while a delivery is leased loses nothing
(another sends it after the lease). Bad input is refused by name."""

from __future__ import annotations

import asyncio
import json
import queue
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import durably
from durably.core.webhooks import (
    DeliveryNotDead,
    DeliveryState,
    UnknownDelivery,
    UnknownWebhook,
    verify,
)
from durably.errors import ConfigError
from durably.runtime.webhooks import BACKOFF, Courier
from durably.testing import FakeClock

from .processes import kill, start_worker, wait_until
from .stop_app import make_app

TIMEOUT = timedelta(milliseconds=300)  # the sender's; the slow answer comes after it
WAIT = 10  # seconds a delivery may take to arrive before the test calls it lost
FAST_LEASE = ("--webhook-timeout", "1s")  # a delivery's lease: 6s


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A real HTTP server: answers each POST as `script` says ("500", "slow", "200"), then
    200; each request that reached it, answered or not, in `received`."""

    url: str
    script: list[str]
    received: queue.Queue[Received] = field(default_factory=queue.Queue)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    box: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            got = Received(dict(self.headers.items()), self.rfile.read(length))
            me = box[0]
            me.received.put(got)
            answer = me.script.pop(0) if me.script else "200"
            if answer == "slow":
                me.release.wait(timeout=WAIT)  # past the sender's timeout
                answer = "200"
            self.send_response(int(answer))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box.append(Receiver(f"http://127.0.0.1:{server.server_port}/hooks", []))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield box[0]
    box[0].release.set()
    server.shutdown()
    server.server_close()


def _finish_a_run(app: durably.App) -> str:
    @app.workflow
    def checkout(order: int) -> str:
        return f"order {order} paid"

    handle = app.start(checkout, 42, id="order-42", correlation_id="req-1", key="alice")
    app.worker().run_until_idle()
    return handle.id


def _courier(app: durably.App, clock: FakeClock, seed: int = 7) -> Courier:
    return Courier(app.store, clock, timeout=TIMEOUT, lease=TIMEOUT * 10, rng=random.Random(seed))


def test_a_delivery_fails_times_out_then_arrives_signed_with_backoff_between(
    app: durably.App, clock: FakeClock, receiver: Receiver
) -> None:
    hook = app.client.webhooks.add(receiver.url, ["run_completed"], secret="whsec_test")
    receiver.script = ["500", "slow"]
    run_id = _finish_a_run(app)
    courier = _courier(app, clock)
    expected = random.Random(7)  # the courier's jitter, drawn in the same order

    assert courier.deliver_due().failed == 1  # 500
    [first] = app.client.webhooks.deliveries(hook.id)
    assert (first.attempts, first.last_error) == (1, "HTTP 500")
    assert first.due_at == clock.now() + BACKOFF.delay(1, expected)  # up to 30s, jittered
    assert courier.deliver_due().sent == 0  # not due yet

    clock.set(first.due_at)  # type: ignore[arg-type]
    assert courier.deliver_due().failed == 1  # answered after the timeout
    [second] = app.client.webhooks.deliveries(hook.id)
    assert second.attempts == 2
    assert "timed out" in (second.last_error or "")
    assert second.due_at == clock.now() + BACKOFF.delay(2, expected)  # up to 60s

    clock.set(second.due_at)  # type: ignore[arg-type]
    assert courier.deliver_due().delivered == 1
    [done] = app.client.webhooks.deliveries(hook.id)
    assert (done.state, done.attempts, done.delivered_at) == (
        DeliveryState.DELIVERED,
        3,
        clock.now(),
    )
    arrivals = [receiver.received.get(timeout=WAIT) for _ in range(3)]
    assert receiver.received.empty()
    assert len({arrival.body for arrival in arrivals}) == 1  # the same bytes every attempt
    last = arrivals[-1]
    assert last.headers["Content-Type"] == "application/json"
    assert last.headers["Durably-Delivery"] == str(done.id)
    assert last.headers["Durably-Event"] == "run_completed"
    signed = last.headers["Durably-Signature"]
    assert verify("whsec_test", last.body, signed, now=clock.now())
    assert not verify("another secret", last.body, signed, now=clock.now())
    assert not verify("whsec_test", last.body + b" ", signed, now=clock.now())
    assert not verify("whsec_test", last.body, signed, now=clock.now() + timedelta(minutes=6))
    assert json.loads(last.body) == {
        "id": done.id,
        "kind": "run_completed",
        "run": {
            "id": run_id,
            "workflow": "checkout",
            "status": "completed",
            "queue": None,
            "key": "alice",
            "correlation_id": "req-1",
        },
        "at": done.at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }


def test_the_last_failed_attempt_makes_it_dead_and_a_retry_sends_it_again(
    app: durably.App, clock: FakeClock, receiver: Receiver
) -> None:
    hook = app.client.webhooks.add(receiver.url, "run_completed", attempts=2)  # unsigned
    receiver.script = ["500", "503"]
    _finish_a_run(app)
    courier = _courier(app, clock)

    assert courier.deliver_due().failed == 1
    clock.advance("1h")
    assert courier.deliver_due().dead == 1
    [dead] = app.client.webhooks.deliveries(failed=True)
    assert (dead.webhook, dead.attempts, dead.last_error) == (hook.id, 2, "HTTP 503")
    clock.advance("1d")
    assert courier.deliver_due().sent == 0  # dead: never sent again by itself

    app.client.webhooks.retry(dead.id)
    assert app.client.webhooks.deliveries(failed=True) == []
    assert courier.deliver_due().delivered == 1
    arrivals = [receiver.received.get(timeout=WAIT) for _ in range(3)]
    assert "Durably-Signature" not in arrivals[-1].headers
    with pytest.raises(DeliveryNotDead, match="is not dead"):
        app.client.webhooks.retry(dead.id)


def test_bad_input_is_refused_by_name(app: durably.App) -> None:
    hooks = app.client.webhooks
    with pytest.raises(ConfigError, match=r"'run_exploded'.*run_completed, run_failed"):
        hooks.add("https://example.com/hook", ["run_completed", "run_exploded"])
    with pytest.raises(ConfigError, match="scheme 'ftp'"):
        hooks.add("ftp://example.com/hook", ["run_completed"])
    with pytest.raises(ConfigError, match="names no host"):
        hooks.add("http:///hook", ["run_completed"])
    with pytest.raises(ConfigError, match="malformed"):
        hooks.add("http://example.com:99999/", ["run_completed"])
    with pytest.raises(ConfigError, match="at least one event kind"):
        hooks.add("https://example.com/hook", [])
    with pytest.raises(ConfigError, match="attempts are between 1 and"):
        hooks.add("https://example.com/hook", ["run_failed"], attempts=0)
    with pytest.raises(UnknownWebhook, match="'wh_nope'"):
        hooks.remove("wh_nope")
    with pytest.raises(UnknownWebhook, match="'wh_nope'"):
        hooks.deliveries("wh_nope")
    with pytest.raises(UnknownDelivery, match="no webhook delivery has the id 12345"):
        hooks.retry(12345)
    assert hooks.list() == []


@pytest.mark.slow
def test_a_delivery_leased_by_a_killed_worker_is_sent_by_another(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    app = make_app(store_url)  # the app the worker processes serve
    first = None
    try:
        app.client.webhooks.add(receiver.url, ["run_completed"])
        receiver.script = ["slow"]  # holds the first worker's send while it is killed
        first = start_worker(store_url, tmp_path / "first.log", *FAST_LEASE)
        app.start("sleepy", 0.0, id="quick")
        log = tmp_path / "first.log"
        wait_until("the first send", lambda: not receiver.received.empty(), log)
        [leased] = app.client.webhooks.deliveries()
        assert (leased.state, leased.attempts) == (DeliveryState.DUE, 0)
        assert leased.due_at is not None
        assert leased.due_at > datetime.now(UTC)  # leased to the first worker
        kill(first)

        second = start_worker(store_url, tmp_path / "second.log", *FAST_LEASE)
        try:
            receiver.release.set()  # the first's send had no one left to settle it
            wait_until(
                "the delivery, by the second worker after the lease",
                lambda: app.client.webhooks.deliveries()[0].state == DeliveryState.DELIVERED,
                tmp_path / "second.log",
                timeout=120,
            )
        finally:
            kill(second)
        [done] = app.client.webhooks.deliveries()
        assert done.attempts == 1  # the killed worker recorded nothing
        assert receiver.received.qsize() == 2  # the killed worker's send, and the second's
    finally:
        if first is not None and first.poll() is None:
            kill(first)
        app.close()


def test_a_stopped_courier_lets_its_pass_settle_before_it_ends(
    app: durably.App, clock: FakeClock, receiver: Receiver
) -> None:
    """A worker that stops must not end (and let its app close the store) while a pass in a
    thread still writes to the store: closing a SQLite connection in use crashed a process."""
    hook = app.client.webhooks.add(receiver.url, ["run_completed"])
    receiver.script = ["slow"]  # held until released
    _finish_a_run(app)
    courier = Courier(app.store, clock, timeout=timedelta(seconds=5), lease=timedelta(minutes=1))

    async def stop_while_sending() -> DeliveryState:
        sending = asyncio.create_task(courier.run())
        await asyncio.to_thread(receiver.received.get, timeout=WAIT)  # the pass is sending
        sending.cancel()
        receiver.release.set()
        with pytest.raises(asyncio.CancelledError):
            await sending
        [delivery] = app.client.webhooks.deliveries(hook.id)
        return delivery.state

    assert asyncio.run(stop_while_sending()) is DeliveryState.DELIVERED
