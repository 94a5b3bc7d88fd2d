"""An update across a worker's SIGKILL, with real worker processes, on both stores: an update
the run accepted (folded into its history, committed) just before its worker was killed, and
not yet answered, is answered once, with the handler's value, by the worker that takes over;
the caller waiting in another thread gets that answer, and asking again by its id gets the
same."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import MessageReceived
from durably.core.updates import UPDATE_KIND, is_answer_key
from tests.integration.processes import kill, start_worker, wait_until
from tests.integration.update_app import define

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

TARGET = "tests.integration.update_app:app"
OPTIONS = ("--concurrency", "4", "--lease", "2s", "--poll", "50ms")
WAIT = 60.0


@pytest.fixture
def shop(store_url: str) -> Iterator[durably.App]:
    app = define(durably.App(store_url))
    yield app
    app.close()


def _kinds(app: durably.App, run_id: str) -> tuple[int, int]:
    """(update messages in the history, update answers in it)."""
    received = answers = 0
    for event in app.client.history(run_id):
        if event.kind is EventKind.MESSAGE_RECEIVED:
            received += read_payload(event, MessageReceived).kind == UPDATE_KIND
        elif event.kind is EventKind.EVENT_SET and event.name and is_answer_key(event.name):
            answers += 1
    return received, answers


def test_an_update_accepted_before_a_sigkill_is_answered_once(
    shop: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    handle = shop.start("slow_cart", 1.5, id="cart-1")  # a 1.5 s step before it takes items
    first_log = tmp_path / "w0.log"
    first = start_worker(store_url, first_log, *OPTIONS, "--name", "w0", target=TARGET)
    processes.append(first)
    wait_until("the step began", lambda: handle.progress() is not None, first_log, WAIT)

    answered: list[Any] = []
    caller = threading.Thread(
        target=lambda: answered.append(handle.update("add_item", 7, update_id="u-1", timeout=WAIT))
    )
    caller.start()
    # The run folds the update into its history (committed with the step's progress) but
    # answers it only once its handler is registered, after the step: kill it in between.
    wait_until("the update was accepted", lambda: _kinds(shop, "cart-1")[0] == 1, first_log, WAIT)
    kill(first)
    assert _kinds(shop, "cart-1") == (1, 0), "answered before the kill: nothing was tested"
    assert shop.store.mail(["cart-1"]).get("cart-1", ()) == ()  # out of the inbox: history only

    second_log = tmp_path / "w1.log"
    processes.append(start_worker(store_url, second_log, *OPTIONS, "--name", "w1", target=TARGET))
    caller.join(WAIT)
    assert answered == [7]
    assert handle.update("add_item", 7, update_id="u-1") == 7  # asked again: the same answer
    shop.client.signal("cart-1", "checkout")
    assert handle.result(timeout=WAIT) == "charged 7"  # applied once: 7, not 14
    assert _kinds(shop, "cart-1") == (1, 1)
