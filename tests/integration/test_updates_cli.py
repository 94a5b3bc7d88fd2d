"""`durably runs update` (a real subprocess, on both stores, a worker in a thread of the
test): the handler's answer printed as JSON, the arguments given as JSON, a refusal one line
saying why, with a non-zero exit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably

from .test_cli import durably_cli, refused
from .test_updates import WAIT, Serving
from .update_app import define


@pytest.fixture
def shop(store_url: str) -> Iterator[durably.App]:
    app = define(durably.App(store_url))
    app.start("cart", [2], id="c-1")
    serving = Serving(app)
    yield app
    serving.stop()
    app.close()


def test_an_update_from_the_command_line(shop: durably.App, store_url: str, tmp_path: Path) -> None:
    def update(*args: str) -> object:
        result = durably_cli("runs", "update", *args, "--store", store_url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    assert update("c-1", "add_item", "3", "--id", "line-1") == 5
    assert update("c-1", "add_item", "3", "--id", "line-1") == 5  # applied once
    assert update("c-1", "add_item", "1", "--timeout", "10s") == 6
    assert durably.RunHandle(shop.client, "c-1").query("total") == 6


def test_refusals_say_why(shop: durably.App, store_url: str, tmp_path: Path) -> None:
    def update(*args: str) -> object:
        return durably_cli("runs", "update", "--store", store_url, *args, cwd=tmp_path)

    negative = update("c-1", "add_item", "--", "-1")  # `--`: -1 is an argument, not an option
    refused(negative, 1, "refused by its validator: ValueError")
    refused(update("c-1", "add_item", "three"), 1, "argument 1 of the update ('three') is not JSON")
    refused(update("nope", "add_item", "1"), 1, "no run has the id 'nope'")
    refused(update("c-1", "rename", "1", "--timeout", "0.3s"), 1, "not answered in time")
    shop.client.signal("c-1", "checkout")
    assert durably.RunHandle(shop.client, "c-1").result(timeout=WAIT) == "charged 2"
