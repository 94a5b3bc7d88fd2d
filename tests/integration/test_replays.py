"""Replay tests on both stores: a run exported with `durably runs export` replays against the
current code without running any step; a compatible change (behind durably.patched) passes,
an incompatible one fails with NonDeterminismError naming both calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import durably
from durably import NonDeterminismError, PayloadError
from durably.testing import FakeClock, replay

from .test_cli import durably_cli

VERSION = "1"


def shop(app: durably.App, code: str, ran: list[str]) -> None:
    """`order(id)`: reserve, sleep an hour, ship, then sleep a day (it is in flight then).
    "patched" adds a fraud check after the first sleep behind a patch; "breaking" adds it
    without one."""

    @app.step
    async def reserve(order: str) -> str:
        ran.append(f"reserve {order}")
        return order

    @app.step
    async def check_fraud(order: str) -> str:
        ran.append(f"check {order}")
        return order

    @app.step
    async def ship(order: str) -> str:
        ran.append(f"ship {order}")
        return f"shipped {order}"

    @app.workflow(name="order", version=VERSION)
    async def order(order_id: str) -> str:
        await reserve(order_id)
        await durably.sleep("1h")
        if code == "breaking" or (code == "patched" and durably.patched("fraud")):
            await check_fraud(order_id)
        shipped: str = await ship(order_id)
        await durably.sleep("1d")
        return shipped


@pytest.fixture
def exported(app: durably.App, clock: FakeClock, tmp_path: Path, store_url: str) -> Path:
    """A real run of the first code, shipped and waiting a day, exported by the CLI."""
    shop(app, "first", [])
    app.start("order", "o-1", id="o-1")
    app.run_until_idle()
    clock.advance("1h")
    app.run_until_idle()
    path = tmp_path / "run.json"
    result = durably_cli("runs", "export", "o-1", "--store", store_url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    path.write_text(result.stdout)
    return path


def test_the_same_code_replays_without_running_a_step(exported: Path, store_url: str) -> None:
    ran: list[str] = []
    code = durably.App(store_url)
    try:
        shop(code, "first", ran)
        replayed = replay(code, exported)
    finally:
        code.close()
    assert (replayed.run_id, replayed.workflow, replayed.calls) == ("o-1", "order", 4)
    assert ran == []


def test_a_change_behind_a_patch_passes_and_one_without_fails(
    exported: Path, store_url: str
) -> None:
    ran: list[str] = []
    patched, breaking = durably.App(store_url), durably.App(store_url)
    try:
        shop(patched, "patched", ran)
        shop(breaking, "breaking", ran)
        assert replay(patched, exported).calls == 4
        with pytest.raises(NonDeterminismError) as caught:
            replay(breaking, str(exported))
    finally:
        patched.close()
        breaking.close()
    assert "'ship'" in str(caught.value)
    assert "'check_fraud'" in str(caught.value)
    assert ran == []


def test_the_export_holds_the_run_and_its_history_and_reads_back(
    app: durably.App, exported: Path
) -> None:
    data = json.loads(exported.read_text())
    assert data["format"] == "durably.run/1"
    assert data["run"]["id"] == "o-1"
    assert data["run"]["version"] == VERSION
    assert [e["kind"] for e in data["events"]][:2] == ["run_started", "claimed"]
    assert data == app.client.export("o-1")
    assert replay(app, data).calls == 4  # the data itself, as well as its file


def test_a_file_that_is_no_export_is_refused(app: durably.App, tmp_path: Path) -> None:
    shop(app, "first", [])
    path = tmp_path / "other.json"
    path.write_text('{"format": "something/else"}')
    with pytest.raises(PayloadError, match="not a run exported by `durably runs export`"):
        replay(app, path)
    with pytest.raises(PayloadError, match="No such file"):
        replay(app, tmp_path / "missing.json")
