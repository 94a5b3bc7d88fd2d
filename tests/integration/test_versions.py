"""Versions on both stores: a run is pinned to its workflow's version when it starts, a worker
with other code leaves it be (and says so), code that declares the old version compatible
runs it, and `durably workers` / `runs show` say which live worker runs what."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

import durably
from durably import ConfigError, RunStatus
from durably.testing import FakeClock

from .processes import start_worker, wait_until
from .stop_app import make_app
from .test_cli import durably_cli


def v1_app(app: durably.App) -> durably.Workflow:
    @app.step
    async def pack(item: str) -> str:
        return f"packed {item}"

    @app.workflow
    async def ship(item: str) -> str:
        await durably.sleep("1h")
        return await pack(item)  # type: ignore[no-any-return]

    return ship


def test_a_run_is_pinned_to_the_version_it_started_on(app: durably.App) -> None:
    ship = v1_app(app)

    @app.workflow(version="2025-06-a")
    async def named() -> None: ...

    assert app.client.get(app.start(ship, "a").id).version == ship.version
    assert app.client.get(app.start(named).id).version == "2025-06-a"
    assert len(ship.version) == 12


def test_other_code_leaves_the_run_pending_until_code_that_serves_its_version_runs(
    app: durably.App,
    other_app: durably.App,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ship_v1 = v1_app(app)
    handle = app.start(ship_v1, "a", id="s-1")
    app.run_until_idle()  # it sleeps an hour
    clock.advance("1h")

    @other_app.step
    async def pack(item: str) -> str:
        return f"packed {item} with care"

    @other_app.workflow(name="ship")
    async def ship_v2(item: str) -> str:
        await durably.sleep("1h")
        return await pack(item)  # type: ignore[no-any-return]

    with caplog.at_level(logging.WARNING, logger="durably.worker"):
        assert other_app.run_until_idle() == 0
    assert handle.status() is RunStatus.PENDING
    [warning] = [r.getMessage() for r in caplog.records if "started on version" in r.getMessage()]
    assert ship_v1.version in warning
    assert ship_v2.version in warning

    compatible = durably.App(app.store_url, clock=clock)
    try:

        @compatible.step(name="pack")
        async def pack_again(item: str) -> str:
            return f"packed {item} again"

        @compatible.workflow(name="ship", versions=[ship_v1.version])
        async def ship_v3(item: str) -> str:
            await durably.sleep("1h")
            return await pack_again(item)  # type: ignore[no-any-return]

        assert compatible.run_until_idle() == 1
        assert handle.result(timeout=0) == "packed a again"
    finally:
        compatible.close()


def test_a_child_is_pinned_to_its_own_workflows_version(app: durably.App) -> None:
    @app.workflow(version="kid-1")
    async def kid() -> str:
        return "kid"

    @app.workflow(version="parent-1")
    async def parent() -> str:
        return await kid()  # type: ignore[no-any-return]

    handle = app.start(parent, id="p-1")
    app.run_until_idle()
    assert handle.result(timeout=0) == "kid"
    [child] = [run for run in app.client.runs().runs if run.parent == "p-1"]
    assert (child.version, app.client.get("p-1").version) == ("kid-1", "parent-1")


def test_versions_must_be_a_list_of_names(app: durably.App) -> None:
    with pytest.raises(ConfigError, match="list of versions"):
        app.workflow(versions="v1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="non-empty string"):
        app.workflow(version=" ")


def test_durably_workers_and_runs_show_say_who_runs_a_runs_version(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = make_app(store_url)
    log = tmp_path / "worker.log"
    try:
        version = client.registry.workflows["sleepy"].version
        handle = client.start("sleepy", 30.0, id="held")
        processes.append(start_worker(store_url, log, "--name", "shipper-1"))
        wait_until("the worker holds the run", lambda: handle.status() is RunStatus.RUNNING, log)

        listed = durably_cli("workers", "--store", store_url, cwd=tmp_path)
        shown = durably_cli("runs", "show", "held", "--store", store_url, cwd=tmp_path)

        assert listed.returncode == 0, listed.stderr
        [line] = [row for row in listed.stdout.splitlines() if row.startswith("shipper-1")]
        assert " live " in line
        assert f"sleepy {version}" in line
        assert shown.returncode == 0, shown.stderr
        assert f"{version} (run by: shipper-1)" in shown.stdout
    finally:
        client.close()


def test_a_run_that_continues_as_new_takes_the_version_of_the_code_that_runs_it(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    @app.workflow(name="loop", version="v1")
    async def loop_v1(n: int) -> int:
        await durably.sleep("1h")
        durably.continue_as_new(n + 1)

    handle = app.start(loop_v1, 0, id="loop")
    app.run_until_idle()
    assert app.client.get("loop").version == "v1"

    @other_app.workflow(name="loop", version="v2", versions=["v1"])
    async def loop_v2(n: int) -> int:
        if n >= 1:
            return n
        await durably.sleep("1h")
        durably.continue_as_new(n + 1)

    clock.advance("1h")
    other_app.run_until_idle()  # v1's generation ends here: the next one is v2's
    assert other_app.client.get("loop").version == "v2"
    assert handle.result(timeout=0) == 1
