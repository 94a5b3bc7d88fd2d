"""The README's five-minute tour, run as printed (issue #24), on both stores.

Its ```python blocks are written, in order, to the files their first lines name (`shop.py`, the
app; `try_shop.py`, a script that uses it), and `try_shop.py` runs. Then its ```sh commands
that act on the shop app run, in order, as real `durably` processes beside shop.py, with the
store in $DURABLY_STORE (which the tour's `durably.App()` reads). A block that stops running
(a name it does not define, a call with the wrong arguments) fails here.

The one change to the tour's code: in this process, shop.py's `durably.App()` is given the
test's fake clock, so that `durably.sleep("3d")` and retry backoffs pass without waiting. The
`durably` processes import shop.py as printed."""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, dying_worker, events, settle

REPO = Path(__file__).resolve().parents[2]
TOUR = ("## A five-minute tour", "## The guarantees, in plain words")
# The tour's commands that run until they are stopped: not run here.
LONG_RUNNING = ("durably worker", "durably server")
# What the tour's commands do in the state the tour leaves order-A-17 in (completed): these
# are refused, with a one-line error; every other one succeeds.
REFUSED_ON_A_COMPLETED_RUN = {"dlq retry", "dlq skip", "dlq fail", "cancel"}

# Not in the tour: a workflow that runs the tour's `charge_safely` (no workflow of the tour
# calls it), and fails after it when asked to, which undoes it.
PAYS = """

@app.workflow
async def pay(order: Order, then_fail: bool) -> str:
    charge_id = await charge_safely(order)
    if then_fail:
        raise ValueError("out of stock")
    return charge_id
"""


def tour_section() -> str:
    readme = (REPO / "README.md").read_text()
    start, end = readme.index(TOUR[0]), readme.index(TOUR[1])
    return readme[start:end]


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", tour_section(), re.M | re.S)


def tour_files() -> dict[str, str]:
    """Each file the tour's Python blocks name, with its blocks in order."""
    files: dict[str, list[str]] = {}
    for block in code_blocks("python"):
        header = block.splitlines()[0]
        named = re.fullmatch(r"# (\w+\.py)(, continued)?(:.*)?", header)
        assert named, f"a Python block of the tour names no file on its first line: {header!r}"
        name, continued = named.group(1), named.group(2) is not None
        assert continued == (name in files), f"{header!r}: 'continued' only after the first"
        files.setdefault(name, []).append(block)
    return {name: "\n".join(blocks) for name, blocks in files.items()}


def tour_commands() -> list[list[str]]:
    """The tour's `durably` commands about the shop app, as argument lists, in order."""
    commands = []
    for block in code_blocks("sh"):
        for line in block.splitlines():
            about_the_shop = line.startswith("durably ") and "shop:app" in line
            if about_the_shop and not line.startswith(LONG_RUNNING):
                commands.append(shlex.split(line, comments=True))
    return commands


def verb(command: list[str]) -> str:
    """`dlq retry` for `durably dlq retry order-A-17 ...`."""
    words = [word for word in command[1:3] if not word.startswith("-") and ":" not in word]
    groups = ("dlq", "runs", "approvals")
    return " ".join(words[:2] if words[0] in groups else words[:1])


@dataclass
class Tour:
    folder: Path  # where shop.py and try_shop.py are, as printed
    shop: ModuleType  # shop.py, imported in this process on the fake clock
    clock: FakeClock

    @property
    def app(self) -> durably.App:
        app: durably.App = self.shop.app
        return app


@pytest.fixture
def tour(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Tour]:
    for name, text in tour_files().items():
        (tmp_path / name).write_text(text)
    assert {path.name for path in tmp_path.glob("*.py")} == {"shop.py", "try_shop.py"}
    monkeypatch.setenv("DURABLY_STORE", store_url)
    monkeypatch.chdir(tmp_path)
    clock = FakeClock(datetime.now(UTC))  # near the clock of the `durably` processes
    extra = getattr(request, "param", "")
    shop = load_shop(tmp_path / "shop.py", clock, extra, monkeypatch)
    yield Tour(tmp_path, shop, clock)
    shop.app.close()


def load_shop(path: Path, clock: FakeClock, extra: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """shop.py as printed (and `extra` code after it), imported as `shop`, its app on `clock`."""
    source = path.read_text()
    assert source.count("durably.App()") == 1, "the tour's app is no longer `durably.App()`"
    source = source.replace("durably.App()", "durably.App(clock=_fake_clock)") + extra
    loaded = path.with_name("_shop_on_a_fake_clock.py")  # where the workflows' source is read
    loaded.write_text(source)
    module = ModuleType("shop")
    module.__file__ = str(loaded)
    module._fake_clock = clock  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shop", module)
    exec(compile(source, str(loaded), "exec"), module.__dict__)
    return module


def durably_command(tour: Tour, command: list[str]) -> subprocess.CompletedProcess[str]:
    """The tour's command, as a real `durably` process beside shop.py."""
    assert command[0] == "durably"
    return subprocess.run(
        [sys.executable, "-m", "durably", *command[1:]],
        cwd=tour.folder,
        env=dict(os.environ),  # with the store in DURABLY_STORE
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_tour_runs_as_printed(tour: Tour, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(tour.folder / "try_shop.py"), run_name="__main__")
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["pending", "reserved A-17", "ch_order-A-17:0:charge"]
    app = tour.app
    assert app.client.get("follow-up-A-17").status is RunStatus.PENDING
    assert app.client.get("large-A-18").status is RunStatus.PENDING

    app.run_until_idle()  # a worker: large-A-18 asks for its approval, follow-up-A-17 sleeps
    mail = capsys.readouterr().out
    assert "mail to manager: Approve? https://shop.example/approvals/" in mail
    assert [pending.run_id for pending in app.client.approvals()] == ["large-A-18"]

    ran = []
    for command in tour_commands():
        done = durably_command(tour, command)
        what = f"{shlex.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        ran.append(verb(command))
        if verb(command) in REFUSED_ON_A_COMPLETED_RUN:
            assert done.returncode == 1, what  # refused: never 2, a usage error
            [line] = done.stderr.splitlines()
            assert line.startswith("error: "), what
            assert "completed" in line, what  # why: the run has ended
        else:
            assert done.returncode == 0, what
            assert "error:" not in done.stderr, what
    assert ran == [
        "start",
        "signal",
        "approvals list",
        "approve",
        "dlq list",
        "dlq retry",
        "dlq skip",
        "dlq fail",
        "cancel",
        "pause",
        "resume",
        "runs restart",
        "upgrade",
        "runs list",
        "runs list",
        "runs show",
        "runs show",
    ]

    settle(app, tour.clock)  # past the 3 days of follow_up's sleep
    assert app.client.get("follow-up-A-17").status is RunStatus.COMPLETED
    assert app.handle("follow-up-A-17").result(timeout=0) == 5  # the first signal
    assert "mail to A-17: How was it?" in capsys.readouterr().out
    large = app.handle("large-A-18")
    assert large.result(timeout=0) == "ch_large-A-18:2:charge"  # approved from the shell
    restart = app.handle("order-A-17.restart-1")
    assert restart.result(timeout=0) == "ch_order-A-17:0:charge"  # charge's result reused


# -- the failure policies: charge_safely, its reconcile hook and its undo ----------------------


def answering(tour: Tour, *statuses: int) -> Any:
    """The tour's stand-in payment API, answering `statuses` first (then 200), and noting
    what the reconcile hook asks it."""
    shop: Any = tour.shop

    class Answering(shop.Payments):  # type: ignore[misc]
        def __init__(self) -> None:
            self.answers = list(statuses)
            self.asked: list[str] = []

        async def charge(self, amount: int, idempotency_key: str) -> Any:
            response = await super().charge(amount, idempotency_key)
            if self.answers:
                response.status = self.answers.pop(0)
            return response

        async def find(self, order_key: str) -> str | None:
            self.asked.append(order_key)
            return await super().find(order_key)  # type: ignore[no-any-return]

    shop.payments = Answering()
    return shop.payments


@pytest.mark.parametrize("tour", [PAYS], indirect=True)
def test_a_throttled_charge_is_retried_after_the_wait_it_asks_for(tour: Tour) -> None:
    answering(tour, 429)
    handle = tour.app.start("pay", tour.shop.Order("A-19", 100), False, id="pay-A-19")
    tour.app.run_until_idle()
    [failed] = events(tour.app, handle.id, EventKind.STEP_ATTEMPT_FAILED)
    assert json.loads(failed.data or "{}")["error_class"] == "durably.errors.Throttled"
    retry_at = datetime.fromisoformat(json.loads(failed.data or "{}")["retry_at"])
    assert retry_at - failed.at >= timedelta(seconds=1)  # the response's retry_after
    # the retry's due time exactly: with the tour's rate=20, the token due then is whole
    # (floats once left 0.99999 of it, and the run was claimed again and again)
    tour.clock.set(retry_at)
    tour.app.run_until_idle()
    assert handle.result(timeout=0) == "ch_pay-A-19:0:charge_safely"


@pytest.mark.parametrize("tour", [PAYS], indirect=True)
def test_a_declined_card_fails_the_run_at_once(tour: Tour) -> None:
    answering(tour, 402)
    handle = tour.app.start("pay", tour.shop.Order("A-20", 100), False, id="pay-A-20")
    settle(tour.app, tour.clock)
    with pytest.raises(durably.WorkflowFailed, match="card declined"):
        handle.result(timeout=0)
    assert len(events(tour.app, handle.id, EventKind.STEP_STARTED)) == 1  # no retry


@pytest.mark.parametrize("tour", [PAYS], indirect=True)
def test_a_failure_after_the_charge_refunds_it(
    tour: Tour, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = tour.app.start("pay", tour.shop.Order("A-21", 100), True, id="pay-A-21")
    settle(tour.app, tour.clock)
    assert handle.status() is RunStatus.FAILED
    assert "refunded ch_pay-A-21:0:charge_safely" in capsys.readouterr().out


@pytest.mark.parametrize("tour", [PAYS], indirect=True)
def test_a_charge_cut_short_by_a_crash_is_reconciled_first(tour: Tour) -> None:
    payments = answering(tour)
    handle = tour.app.start("pay", tour.shop.Order("A-22", 100), False, id="pay-A-22")
    started = {
        "key": "pay-A-22:0:charge_safely",
        "input": {"args": [{"id": "A-22", "total": 100}, False], "kwargs": {}},
    }
    dying_worker(
        tour.app.store,
        tour.clock,
        ["pay"],
        record=[(EventKind.STEP_STARTED, 0, "charge_safely", 1, json.dumps(started))],
    )
    tour.clock.advance(DEAD_LEASE + timedelta(seconds=1))
    settle(tour.app, tour.clock)
    assert payments.asked == ["A-22"]  # find_charge: no charge was made, so it runs again
    assert handle.result(timeout=0) == "ch_pay-A-22:0:charge_safely"
