"""The five-minute test, for a newcomer: three runs that went wrong in three ways (a throttled
dependency exhausted its retries; an undo failed after a step failed; a worker died under a
run), and both `durably runs show` and the dashboard's run page must say, in words, what
happened and what a person can do next. On both stores, with the real server and the real
`durably` command."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

import durably
from durably.stores.records import WorkerBeat
from durably.testing import FakeClock
from tests.integration import upgrade_app

from .conftest import Live, settle
from .shop import Payments, make_shop

SHOP = str(Path(__file__).resolve().parent / "shop.py")


def runs_show(store_url: str, run_id: str, *options: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "durably", "runs", "show", run_id, "--store", store_url, *options],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def run_page(live: Live, run_id: str) -> str:
    """The dashboard's run page as the person on call reads it (with a write token: with its
    buttons)."""
    with httpx.Client(base_url=live.url) as web:
        web.post("/login", data={"token": live.keys.write, "next": "/runs"})
        page = web.get(f"/runs/{run_id}")
    assert page.status_code == 200
    text = re.sub(r"<[^>]+>", " ", page.text)  # the words, without the markup
    return html.unescape(re.sub(r"\s+", " ", text))


def test_three_broken_runs_explain_themselves(
    live: Live, payments: Payments, store_url: str, clock: FakeClock
) -> None:
    app = live.app
    payments.throttling = True
    app.start("settle_order", "o-1", id="throttled")
    app.start("book", "o-2", id="undo-failed")
    settle(app, "throttled", "undo-failed")
    app.start("checkout", "o-3", 3, id="stranded")
    [claim] = app.store.claim(
        "worker-7", ["checkout"], now=app.clock.now(), lease=timedelta(milliseconds=50), limit=1
    )
    assert claim.run_id == "stranded"  # ... and worker-7 dies holding it
    clock.advance("100ms")  # its lease runs out

    cli, page = runs_show(store_url, "throttled"), run_page(live, "throttled")
    for said in (cli, page):
        assert "parked for a person after 3 attempt(s)" in said
        assert "step capture failed (attempts exhausted) with durably.errors.Throttled" in said
        assert "429 Too Many Requests from payments" in said
        assert "durably dlq retry throttled" in said  # what to do next
        assert "durably dlq fail throttled" in said
    assert "Retry" in page  # and the button that does it

    cli, page = runs_show(store_url, "undo-failed"), run_page(live, "undo-failed")
    for said in (cli, page):
        assert "an undo failed" in said
        assert "the warehouse lost hold-o-2" in said
        assert (
            "after step bill failed (terminal) with durably.errors.Terminal: card declined" in said
        )
        assert "retry the undo (durably dlq retry undo-failed)" in said
    assert "Root cause: step bill failed" in page
    # only what its state allows: the undo done by hand, never Skip the step nor a signal
    assert "I did the undo by hand" in page
    assert "Skip the step" not in page
    assert "Send signal" not in page
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        letters = {letter["run"]: letter for letter in web.get("/api/dead-letters").json()}
    undo = letters["undo-failed"]
    assert (undo["undo"], undo["step"]) == (True, "reserve")  # the undo that fails, not bill
    assert undo["error"]["message"] == "the warehouse lost hold-o-2"

    cli, page = runs_show(store_url, "stranded"), run_page(live, "stranded")
    for said in (cli, page):
        assert "stranded: the lease of worker worker-7 expired at " in said
        assert "presumed dead" in said
        assert "no live worker runs workflow 'checkout'" in said  # nobody will take it over
        assert "start one (durably worker MODULE:ATTR)" in said


def test_the_first_hour_a_bug_a_dead_worker_and_a_deploy_explain_themselves(
    live: Live, store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """What hurt a newcomer most, each said in words on both sides: where a step raised, a
    worker that died holding a run (seen in seconds), and a run a deploy left behind."""
    app = live.app
    app.start("ship_label", "o-5", id="typo")
    settle(app, "typo")
    cli, page = runs_show(store_url, "typo", "--traceback"), run_page(live, "typo")
    for said in (cli, page):
        assert "NameError: name 'printer' is not defined" in said
        assert f'File "{SHOP}", line ' in said  # the file and line of the bug
        assert "in print_label" in said
        assert "return printer.print(order)" in said

    # a worker that died holding a run, last heard from four seconds ago: the server reads
    # the test's fake clock, the command the real one (so its run is in a store of its own)
    real = make_shop(f"sqlite:///{tmp_path / 'real.db'}", Payments())
    for shop in (app, real):
        shop.start("checkout", "o-6", 6, id="held")
        lease, at = timedelta(seconds=10), shop.clock.now()
        [claim] = shop.store.claim("worker-9", ["checkout"], now=at, lease=lease, limit=1)
        assert claim.run_id == "held"  # ... and worker-9 dies holding it
    beat = timedelta(seconds=1)
    silent_since = datetime.now(UTC) - timedelta(seconds=4)
    real.store.beat(WorkerBeat("worker-9", silent_since, silent_since, beat, {"checkout": ()}))
    real.close()
    app.store.beat(WorkerBeat("worker-9", clock.now(), clock.now(), beat, {"checkout": ()}))
    clock.advance("4s")
    cli = runs_show(f"sqlite:///{tmp_path / 'real.db'}", "held")
    for said in (cli, run_page(live, "held")):
        # four seconds and more: the command's own start takes real time, longer under load
        silent = re.search(r"held by worker worker-9, silent for (\d+) s and presumed dead", said)
        assert silent is not None, said
        assert int(silent.group(1)) >= 4
        assert "(durably runs release held)" in said

    old = upgrade_app.build(durably.App(store_url, clock=clock), "first")
    old.start("order", "o-7", id="left-behind")
    old.close()
    edited = upgrade_app.build(durably.App(store_url, clock=clock), "edited")
    serves = {"order": tuple(edited.registry.workflows["order"].serves)}
    seen = datetime.now(UTC)  # live by the real clock and by the fake one, which is earlier
    app.store.beat(WorkerBeat("worker-new", seen, seen, timedelta(hours=1), serves))
    edited.close()
    cli, page = runs_show(store_url, "left-behind"), run_page(live, "left-behind")
    for said in (cli, page):
        assert "the code it started on: move it to the deployed code" in said
        assert "(durably upgrade MODULE:ATTR)" in said
