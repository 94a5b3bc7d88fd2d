"""Lists of parked runs are bounded by their page in the store's query, on both stores: the
approvals waiting for a decision and the dead letters are found by the runs' rows, and only
as many histories are read as the page shows, however many runs are parked."""

from __future__ import annotations

from typing import Any

import pytest

import durably
from durably import Retry
from durably.client.approvals import pending_approvals
from durably.client.dead_letters import dead_letters
from durably.stores import Store
from durably.testing import FakeClock

PARKED = 200


class Counting:
    """The real store, counting the histories read."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.histories = 0

    def history(self, run_id: str) -> Any:
        self.histories += 1
        return self._store.history(run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def parked(app: durably.App, clock: FakeClock) -> durably.App:
    """PARKED runs waiting for an approval, an escalation, and three failed steps."""

    @app.workflow
    def refund(order: str) -> bool:
        return bool(durably.approval("refund").approved)

    @app.workflow
    def vip(order: str) -> bool:
        return bool(durably.escalate(f"is {order} a VIP?"))

    @app.step(retry=Retry(attempts=1))
    def call(order: str) -> None:
        raise ConnectionError("unreachable")

    @app.workflow
    def broken(order: str) -> None:
        call(order)

    app.start_many([durably.Start("refund", (f"r-{n}",), id=f"r-{n}") for n in range(PARKED)])
    app.run_until_idle()
    clock.advance(60)
    app.start("vip", "ada", id="vip-ada")
    for n in range(3):
        app.start("broken", f"b-{n}", id=f"b-{n}")
        app.run_until_idle()
        clock.advance(1)
    return app


def test_the_first_approval_reads_one_history_of_all_those_parked(parked: durably.App) -> None:
    store = Counting(parked.store)

    [first] = pending_approvals(store, limit=1)  # type: ignore[arg-type]

    assert (first.run_id, first.name) == ("r-0", "refund")  # the oldest
    assert store.histories == 1
    every = pending_approvals(parked.store, limit=1_000)
    assert len(every) == PARKED + 1
    assert every[-1].run_id == "vip-ada"  # parked last, the escalation is listed last


def test_the_dead_letters_read_only_their_page(parked: durably.App) -> None:
    store = Counting(parked.store)

    letters = dead_letters(store, limit=2)  # type: ignore[arg-type]

    assert [letter.run_id for letter in letters] == ["b-2", "b-1"]  # the newest first
    assert store.histories == 2  # not one of the runs waiting for an approval
    every = {letter.run_id for letter in dead_letters(parked.store, limit=100)}
    assert every == {"b-0", "b-1", "b-2", "vip-ada"}  # an escalation is a dead letter too
