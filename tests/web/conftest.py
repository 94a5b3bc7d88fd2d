"""Fixtures of the web tests: the shop app on each real store, tokens, and the real server
(uvicorn on a free loopback port, in a thread of the test process) serving it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import uvicorn

import durably
from durably.core.status import FINAL, PARKED, RunStatus
from durably.testing import FakeClock
from durably.web.auth import Tokens, hash_token, new_token
from durably.web.server import create_app

from .shop import Payments, make_shop

_RESTING = FINAL | PARKED | {RunStatus.PAUSED}


@dataclass(frozen=True)
class Keys:
    write: str  # the token of "erin", who may act
    read: str  # the token of "rita", who may only look
    tokens: Tokens


@pytest.fixture
def keys() -> Keys:
    write, read = new_token(), new_token()
    lines = f"erin write {hash_token(write)}\nrita read {hash_token(read)}\n"
    return Keys(write, read, Tokens.parse(lines, source="test"))


@pytest.fixture
def payments() -> Payments:
    return Payments()


@pytest.fixture
def shop(store_url: str, payments: Payments, clock: FakeClock) -> Iterator[durably.App]:
    app = make_shop(store_url, payments, clock=clock)
    yield app
    app.close()


@dataclass(frozen=True)
class Live:
    url: str
    app: durably.App
    keys: Keys

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.keys.write}"}


def settle(app: durably.App, *run_ids: str, rounds: int = 100) -> None:
    """Run the app's due runs until each of `run_ids` ended or parked, moving its fake clock
    on to the next due time (a retry's) between drains."""
    clock = app.clock
    assert isinstance(clock, FakeClock)
    for _ in range(rounds):
        app.run_until_idle()
        runs = [app.client.get(run_id) for run_id in run_ids]
        waiting = [run.available_at for run in runs if run.status not in _RESTING]
        if not waiting:
            return
        due = [at for at in waiting if at is not None]
        assert due, f"runs wait for no time, nothing will come: {runs}"
        clock.set(max(clock.now(), min(due)))
    raise AssertionError(f"runs did not settle: {[app.client.get(r) for r in run_ids]}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(app: durably.App, keys: Keys, **options: Any) -> Iterator[Live]:
    """The real server for `app` (create_app's `options`), on 127.0.0.1, until the block ends."""
    web = create_app(app, tokens=keys.tokens, sample_every=0.5, **options)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(web, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield Live(f"http://127.0.0.1:{port}", app, keys)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def live(shop: durably.App, keys: Keys) -> Iterator[Live]:
    """The real server for `shop`, until the test ends."""
    with serving(shop, keys) as running:
        yield running
