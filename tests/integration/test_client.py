"""The one client every caller goes through (App, the CLI, the HTTP API): starting runs,
reading them a page at a time, a person's actions, and the wake-ups of local workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import durably
from durably import RunStatus
from durably.client.client import Client
from durably.core.history import EventKind
from durably.core.retry import Retry
from durably.stores import open_store
from durably.testing import FakeClock


@dataclass(frozen=True)
class Order:
    id: str
    total: int


class Shop:
    def __init__(self) -> None:
        self.down = True  # the payment service fails while True


def define(app: durably.App, shop: Shop) -> None:
    """`fulfil(order)`: a charge that fails (one attempt) while the shop is down."""

    @app.step(retry=Retry(attempts=1))
    async def charge(order: Order) -> str:
        if shop.down:
            raise ConnectionError("payments unreachable")
        return f"ch-{order.id}"

    @app.workflow
    async def fulfil(order: Order) -> str:
        charge_id: str = await charge(order)
        return charge_id

    @app.workflow
    async def count(n: int, *, step: int = 1) -> int:
        return n + step


@pytest.fixture
def shop(app: durably.App) -> Shop:
    shop = Shop()
    define(app, shop)
    return shop


@pytest.fixture
def client(app: durably.App, store_url: str, clock: FakeClock) -> Iterator[Client]:
    """A client of its own (as the CLI makes one), on the app's store, knowing its workflows."""
    store = open_store(store_url)
    yield Client(store, registry=app, clock=clock)
    store.close()


@pytest.fixture
def woken(client: Client) -> Iterator[list[str]]:
    calls: list[str] = []
    unsubscribe = client.subscribe(lambda: calls.append("woken"))
    yield calls
    unsubscribe()


def parked(app: durably.App, client: Client, run_id: str) -> str:
    client.start("fulfil", [Order(run_id, 12)], id=run_id)
    app.run_until_idle()
    assert client.get(run_id).status is RunStatus.NEEDS_ATTENTION
    return run_id


# -- starting ---------------------------------------------------------------------------------


def test_start_creates_a_run_once_per_id_and_wakes_local_workers_once(
    client: Client, shop: Shop, woken: list[str], app: durably.App
) -> None:
    first = client.start("fulfil", [Order("o1", 12)], id="o1")
    again = client.start("fulfil", [Order("o1", 12)], id="o1")

    assert (first.created, again.created) == (True, False)
    assert first.run.id == again.run.id == "o1"
    assert first.run.status is RunStatus.PENDING
    assert json.loads(first.run.input) == {"args": [{"id": "o1", "total": 12}], "kwargs": {}}
    assert woken == ["woken"]  # the second start made nothing new due
    assert [run.id for run in app.client.runs().runs] == ["o1"]


def test_start_refuses_another_input_for_a_taken_id(client: Client, shop: Shop) -> None:
    client.start("fulfil", [Order("o1", 12)], id="o1")

    with pytest.raises(durably.RunConflict, match="different input"):
        client.start("fulfil", [Order("o1", 99)], id="o1")


def test_start_refuses_an_input_that_does_not_fit_and_stores_nothing(
    client: Client, shop: Shop, woken: list[str]
) -> None:
    with pytest.raises(durably.PayloadError, match=r"input\.n"):
        client.start("count", ["five"])
    with pytest.raises(durably.PayloadError, match="does not fit its parameters"):
        client.start("count", [1, 2, 3])

    assert client.runs().runs == []
    assert woken == []


def test_start_json_reads_the_input_through_the_parameters_types(
    client: Client, shop: Shop, app: durably.App
) -> None:
    by_position = client.start_json("fulfil", '[{"id": "o1", "total": 12}]', id="o1")
    by_name = client.start_json("count", '{"n": 4, "step": 2}', id="c1")

    assert by_position.created
    assert by_name.created
    assert json.loads(by_name.run.input) == {"args": [], "kwargs": {"n": 4, "step": 2}}
    shop.down = False
    app.run_until_idle()
    assert app.handle("o1").result(timeout=0) == "ch-o1"
    assert app.handle("c1").result(timeout=0) == 6


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ('{"n": "5"}', "at input.n, input should be a valid integer"),
        ('{"n": 1, "nope": 2}', "does not fit its parameters"),
        ("[1, 2, 3]", "does not fit its parameters"),
        ('"5"', "must be a JSON list"),
        ("{n: 1}", "is not JSON"),
    ],
)
def test_start_json_refuses_input_that_does_not_fit(
    client: Client, shop: Shop, given: str, refusal: str
) -> None:
    with pytest.raises(durably.PayloadError, match=refusal):
        client.start_json("count", given, id="c1")
    assert client.runs().runs == []


def test_start_needs_the_apps_workflows(store_url: str, clock: FakeClock) -> None:
    store = open_store(store_url)
    try:
        bare = Client(store, clock=clock)
        with pytest.raises(durably.ConfigError, match="--app"):
            bare.start_json("count", "[1]")
        assert bare.runs().runs == []
    finally:
        store.close()


def test_start_of_an_unknown_workflow_names_the_known_ones(client: Client, shop: Shop) -> None:
    with pytest.raises(durably.UnknownWorkflow, match="known: count, fulfil"):
        client.start_json("nope", "[]")


# -- reading ----------------------------------------------------------------------------------


def test_get_and_history_of_an_unknown_run_say_so(client: Client) -> None:
    with pytest.raises(durably.RunNotFound, match="no run has the id 'ghost' in "):
        client.get("ghost")
    with pytest.raises(durably.RunNotFound, match="'ghost'"):
        client.history("ghost")


def test_history_lists_the_runs_events(client: Client, shop: Shop, app: durably.App) -> None:
    parked(app, client, "o1")

    kinds = [event.kind for event in client.history("o1")]

    assert kinds[0] is EventKind.RUN_STARTED
    assert EventKind.STEP_FAILED in kinds


def test_pages_list_every_run_once_newest_first_with_filters(
    client: Client, shop: Shop, clock: FakeClock
) -> None:
    for n in range(7):  # three instants: runs started at one instant tie on updated_at
        if n % 3 == 0:
            clock.advance("1s")
        client.start("count", [n], id=f"c{n}")
    client.start("fulfil", [Order("o1", 1)], id="o1")
    newest_first = ["o1", "c6", "c5", "c4", "c3", "c2", "c1", "c0"]

    seen, cursor, sizes = [], None, []
    while True:
        page = client.runs(limit=3, cursor=cursor)
        seen += [run.id for run in page.runs]
        sizes.append(len(page.runs))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    assert seen == newest_first
    assert sizes == [3, 3, 2]  # no empty page at the end
    whole = client.runs(limit=8)
    assert [run.id for run in whole.runs] == newest_first
    assert whole.next_cursor is None
    assert [run.id for run in client.runs(workflow="fulfil").runs] == ["o1"]
    first = client.runs(workflow="count", status="pending", limit=4)
    rest = client.runs(workflow="count", status=RunStatus.PENDING, cursor=first.next_cursor)
    assert [run.id for run in first.runs + rest.runs] == newest_first[1:]
    assert client.runs(status=RunStatus.COMPLETED).runs == []


@pytest.mark.parametrize("cursor", ["not-a-cursor", "", "WyJ4Il0", "e30"])
def test_a_malformed_cursor_is_refused_by_name(client: Client, cursor: str) -> None:
    with pytest.raises(durably.DurablyError, match=f"the cursor '{cursor}' is not one durably"):
        client.runs(cursor=cursor)


def test_a_bad_status_or_limit_is_refused(client: Client) -> None:
    with pytest.raises(durably.DurablyError, match="'done' is not a run status"):
        client.runs(status="done")
    with pytest.raises(durably.DurablyError, match="limit=0"):
        client.runs(limit=0)


# -- a person's actions -----------------------------------------------------------------------


def test_each_action_is_recorded_with_who_did_it_and_wakes_local_workers_once(
    client: Client, shop: Shop, app: durably.App, woken: list[str]
) -> None:
    to_retry, to_skip, to_fail = (parked(app, client, f"o{n}") for n in range(3))
    assert {letter.run_id for letter in client.dead_letters()} == {to_retry, to_skip, to_fail}
    woken.clear()

    client.retry(to_retry, by="erin")
    assert woken == ["woken"]
    client.skip_step(to_skip, result="ch-by-hand", by="frank")
    assert woken == ["woken"] * 2
    client.fail(to_fail, reason="customer left", by="grace")
    assert woken == ["woken"] * 3

    shop.down = False
    app.run_until_idle()
    assert app.handle(to_retry).result(timeout=0) == "ch-o0"
    assert app.handle(to_skip).result(timeout=0) == "ch-by-hand"
    assert client.get(to_fail).status is RunStatus.FAILED
    [retried] = [e for e in client.history(to_retry) if e.kind is EventKind.RUN_RETRIED]
    [skipped] = [e for e in client.history(to_skip) if e.kind is EventKind.STEP_SKIPPED]
    assert json.loads(retried.data or "{}")["by"] == "erin"
    assert any("grace" in (e.data or "") for e in client.history(to_fail))
    assert client.dead_letters() == []
    assert skipped.data == '"ch-by-hand"'


def test_a_refused_action_wakes_nobody(
    client: Client, shop: Shop, app: durably.App, woken: list[str]
) -> None:
    client.start("count", [1], id="c1")
    app.run_until_idle()
    woken.clear()

    with pytest.raises(durably.DurablyError, match="it is completed"):
        client.retry("c1", by="erin")
    with pytest.raises(durably.RunNotFound):
        client.fail("ghost", by="erin")
    assert woken == []


def test_skip_step_json_checks_the_result_against_the_steps_return_type(
    client: Client, shop: Shop, app: durably.App
) -> None:
    run_id = parked(app, client, "o1")

    with pytest.raises(durably.PayloadError, match="should be a valid string"):
        client.skip_step_json(run_id, "12", by="erin")
    assert client.get(run_id).status is RunStatus.NEEDS_ATTENTION

    client.skip_step_json(run_id, '"ch-typed"', by="erin")
    app.run_until_idle()
    assert app.handle(run_id).result(timeout=0) == "ch-typed"


def test_skip_step_json_without_the_app_records_the_json_as_given(
    client: Client, shop: Shop, app: durably.App, store_url: str, clock: FakeClock
) -> None:
    run_id = parked(app, client, "o1")
    store = open_store(store_url)
    try:
        bare = Client(store, clock=clock)
        with pytest.raises(durably.DurablyError, match="not JSON"):
            bare.skip_step_json(run_id, "{oops", by="erin")
        bare.skip_step_json(run_id, "12", by="erin")  # not a str: nobody here knows
    finally:
        store.close()

    [skipped] = [e for e in client.history(run_id) if e.kind is EventKind.STEP_SKIPPED]
    assert skipped.data == "12"


def test_the_app_is_a_thin_layer_over_its_client(
    app: durably.App, shop: Shop, clock: FakeClock
) -> None:
    woken: list[str] = []
    unsubscribe = app.subscribe(lambda: woken.append("woken"))
    try:
        app.start("count", 1, id="c1")
        app.client.start("count", [2], id="c2")
    finally:
        unsubscribe()
    app.client.start("count", [3], id="c3")

    assert woken == ["woken", "woken"]  # one listener list, whichever door was used
    assert [run.id for run in app.client.runs().runs] == [run.id for run in app.client.runs().runs]


def test_what_app_once_did_itself_is_refused_with_the_clients_call(app: durably.App) -> None:
    with pytest.raises(AttributeError, match=r"App.signal is gone: .* app.client.signal\("):
        app.signal  # noqa: B018 (the attribute is the point)
    with pytest.raises(AttributeError, match=r"app.client.decide\(run_id, name, approved=True"):
        app.approve  # noqa: B018
    with pytest.raises(AttributeError, match=r"'App' object has no attribute 'nonsense'"):
        app.nonsense  # noqa: B018
