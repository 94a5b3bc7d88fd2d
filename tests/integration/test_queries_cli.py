"""`durably runs query` (a real subprocess, on both stores): the answer printed as JSON, the
arguments given as JSON, and each refusal one line saying what to do."""

from __future__ import annotations

import json
from pathlib import Path

import durably

from .query_app import define
from .test_cli import durably_cli, refused

ITEMS = [{"sku": 1, "price": 3}, {"sku": 2, "price": 4}]
APP = "tests.integration.query_app:app"


def test_a_query_from_the_command_line(app: durably.App, store_url: str, tmp_path: Path) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    before = (app.client.get("o-1"), app.client.history("o-1"))

    def query(*args: str) -> object:
        result = durably_cli(
            "runs", "query", *args, "--app", APP, "--store", store_url, cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    assert query("o-1", "total") == 7
    assert query("o-1", "lines", "1") == [4]
    assert query("o-1", "lines", "--timeout", "10s") == [3, 4]
    assert (app.client.get("o-1"), app.client.history("o-1")) == before


def test_refusals_say_what_to_do(app: durably.App, store_url: str, tmp_path: Path) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    where = ("--store", store_url)
    no_app = durably_cli("runs", "query", "o-1", "total", *where, cwd=tmp_path)
    refused(no_app, 1, "pass --app module:app")
    unknown = durably_cli("runs", "query", "o-1", "nope", "--app", APP, *where, cwd=tmp_path)
    refused(unknown, 1, "registered by then: lines, total")
    not_json = durably_cli(
        "runs", "query", "o-1", "lines", "one", "--app", APP, *where, cwd=tmp_path
    )
    refused(not_json, 1, "argument 1 of the query ('one') is not JSON")
    missing = durably_cli("runs", "query", "o-2", "total", "--app", APP, *where, cwd=tmp_path)
    refused(missing, 1, "no run has the id 'o-2'")
