"""Custom attributes end to end, on both stores: given to every kind of start (App.start and
start_async, start_many's Start, start_json, `durably start --attr`), refused with what is
wrong and nothing written (a secret-looking name, above all: attributes are stored in the
clear), kept by a restart and not inherited by a child, shown by `durably runs show`, and
searched by, with the key, the queue and the time a run started, from Python and from the
command line."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import durably
from durably.client.starts import Start
from durably.errors import PayloadError
from durably.testing import FakeClock
from tests.contract.support import execute_sql

from .cli_app import Order, make_app
from .test_cli import APP, durably_cli, refused


@pytest.fixture
def shop(store_url: str, clock: FakeClock) -> Iterator[durably.App]:
    app = make_app(store_url, clock=clock)
    app.queue("emails")

    @app.workflow
    async def parent(order: str) -> int:
        child = await durably.start_child(app.workflow_named("count"), 1)
        return await child.result()  # type: ignore[no-any-return]

    yield app
    app.close()


def ids(app: durably.App, **filters: object) -> list[str]:
    return [run.id for run in app.client.runs(**filters).runs]  # type: ignore[arg-type]


def test_every_start_records_its_attributes_exactly_as_given(shop: durably.App) -> None:
    given = {"customer": "42", "plan": "pro", "city": "Zürich", "note": "a=b: c"}
    shop.start("count", 1, id="app", attributes=given)
    shop.client.start_json("count", "[2]", id="json", attributes={"customer": "42"})
    shop.start_many(
        [
            Start("count", [3], id="many", attributes={"customer": "7"}),
            Start("count", [4], id="bare"),
        ]
    )

    async def started_on_a_loop() -> None:
        await shop.start_async("count", 5, id="async", attributes={"customer": "42"})

    asyncio.run(started_on_a_loop())

    assert shop.client.attributes("app") == given
    assert shop.client.attributes("json") == {"customer": "42"}
    assert shop.client.attributes("many") == {"customer": "7"}
    assert shop.client.attributes("bare") == {}
    assert ids(shop, attributes={"customer": "42"}) == ["json", "async", "app"]  # ties by id
    assert ids(shop, attributes={"customer": "42", "plan": "pro"}) == ["app"]
    again = shop.start("count", 1, id="app", attributes={"customer": "1"})  # found: kept
    assert again.id == "app"
    assert shop.client.attributes("app") == given


@pytest.mark.parametrize(
    ("attributes", "said"),
    [
        ({"api_key": "k-123"}, "looks like a secret's"),
        ({"customerPassword": "hunter2"}, "stored unencrypted, in the clear"),
        ({"card-number": "4242"}, "durably.Secret[str]"),
        ({"customer": 42}, "must be a string, not 42: write '42'"),
        ({"customer": ""}, "must be a non-empty string"),
        ({"customer": "a\x00b"}, "cannot hold a control character"),
        ({"customer": "x" * 201}, "at most 200 characters"),
        ({"a:b": "1"}, "cannot hold ':'"),
        ({"a=b": "1"}, "cannot hold '='"),
        ({"": "1"}, "an attribute's name must be a non-empty string"),
        ({f"n{i}": "v" for i in range(21)}, "at most 20 names"),
        (["customer", "42"], "must be a mapping of names to strings"),
    ],
)
def test_a_refused_attribute_says_why_and_writes_nothing(
    shop: durably.App, store_url: str, attributes: object, said: str
) -> None:
    with pytest.raises(PayloadError) as refusal:
        shop.start("count", 1, id="r1", attributes=attributes)  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        shop.start_many([Start("count", [2], id="r2"), Start("count", [3], attributes=attributes)])  # type: ignore[arg-type]

    assert said in str(refusal.value)
    assert shop.client.runs().runs == []
    assert execute_sql(store_url, "SELECT count(*) FROM durably_attributes") == [(0,)]


def test_a_restart_keeps_the_attributes_and_a_child_does_not_inherit_them(
    shop: durably.App, clock: FakeClock
) -> None:
    shop.start("parent", "o-1", id="p", attributes={"customer": "42"})
    shop.run_until_idle()
    [child] = [run for run in shop.client.runs().runs if run.parent == "p"]

    restarted = shop.client.restart("p", from_step=0)

    assert shop.client.attributes(restarted.id) == {"customer": "42"}
    assert shop.client.attributes(child.id) == {}
    assert ids(shop, attributes={"customer": "42"}) == [restarted.id, "p"]


def test_runs_are_found_by_attribute_key_queue_and_when_they_started(
    shop: durably.App, clock: FakeClock
) -> None:
    shop.start("count", 1, id="a", attributes={"customer": "42"}, key="t-1", queue="emails")
    clock.advance(60)
    shop.start("count", 2, id="b", attributes={"customer": "42"}, key="t-2")
    clock.advance(60)
    shop.start("count", 3, id="c", attributes={"customer": "7"}, key="t-1")

    assert ids(shop, key="t-1") == ["c", "a"]
    assert ids(shop, queue="emails") == ["a"]
    assert ids(shop, queue="default") == ["c", "b"]
    assert ids(shop, attributes={"customer": "42"}, key="t-1") == ["a"]
    assert ids(shop, attributes={"customer": "42"}, since=clock.now() - timedelta(minutes=1)) == [
        "b"
    ]
    assert ids(shop, attributes={"customer": "42"}, until=clock.now()) == ["b", "a"]
    assert ids(shop, attributes={"api_key": "x"}) == []  # no run can have one: none found
    with pytest.raises(PayloadError, match="cannot hold a control character"):
        shop.client.runs(attributes={"customer": "4\x002"})
    with pytest.raises(PayloadError, match="control character"):
        shop.client.runs(key="t\x001")


def test_the_command_line_starts_with_attributes_shows_and_finds_them(
    shop: durably.App, store_url: str, tmp_path: Path
) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return durably_cli(*args, cwd=tmp_path, app_store=store_url)

    order = '[{"id": "o1", "total": 12}]'
    attributes = ("--attr", "customer=42", "--attr", "plan=pro:gold")
    started = cli("start", "fulfil", "--app", APP, "--input", order, "--id", "o1", *attributes)
    assert started.returncode == 0, started.stderr
    shop.start("fulfil", Order("o2", 5), id="o2", attributes={"customer": "42"}, key="t-9")
    shop.start("fulfil", Order("o3", 5), id="o3", attributes={"customer": "7"}, queue="emails")

    assert shop.client.attributes("o1") == {"customer": "42", "plan": "pro:gold"}
    shown = cli("runs", "show", "o1", "--store", store_url)
    assert "attributes:    customer=42, plan=pro:gold" in shown.stdout

    def listed(*options: str) -> list[dict[str, object]]:
        found = cli("runs", "list", "--store", store_url, "--json", *options)
        assert found.returncode == 0, found.stderr
        runs: list[dict[str, object]] = json.loads(found.stdout)["runs"]
        return runs

    # o1 is stamped by the clock of the command's app, the others by the test's: as sets
    assert {run["id"] for run in listed("--attr", "customer=42")} == {"o2", "o1"}
    both = listed("--attr", "customer:42", "--attr", "plan=pro:gold", "--queue", "default")
    assert [run["id"] for run in both] == ["o1"]
    [keyed] = listed("--key", "t-9")
    assert (keyed["id"], keyed["key"], keyed["attributes"]) == ("o2", "t-9", {"customer": "42"})
    assert [run["id"] for run in listed("--queue", "emails")] == ["o3"]

    refused(cli("runs", "list", "--store", store_url, "--attr", "customer"), 2, "name=value")
    secret = cli("start", "count", "--app", APP, "--input", "[1]", "--attr", "api_key=k-1")
    refused(secret, 1, "stored unencrypted")
    assert [run.id for run in shop.client.runs(workflow="count").runs] == []
