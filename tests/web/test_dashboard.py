"""The dashboard end to end in a real headless Chromium (Debian's `chromium`, driven by
Playwright with that executable), against the real server: log in; a failing run is
dead-lettered, the fault is fixed, Retry is clicked and it completes; an approval is
approved; a run is cancelled; runs are ticked in the list and cancelled in bulk, then every
run matching the list's filter paused; every page is screenshotted into
tests/web/screenshots/ (git-ignored) for a person to look at. Also: CSRF and roles on the
dashboard's forms."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from durably.core.status import RunStatus
from tests.conftest import installed

from .conftest import Live, settle
from .shop import Payments

pytestmark = pytest.mark.browser

SHOTS = Path(__file__).parent / "screenshots"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """The browser half runs on SQLite: the API tests cover both stores."""
    return f"sqlite:///{tmp_path / 'durably.db'}"


def chromium_path() -> str:
    return installed("chromium", "chromium", "chromium-browser", needed_by="the browser tests")


@pytest.fixture
def page(live: Live) -> Iterator[Any]:
    """A logged-in page of a fresh headless Chromium (the write token's person, erin)."""
    executable = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        opened = browser.new_page(viewport={"width": 1400, "height": 900})
        opened.on("dialog", lambda dialog: dialog.accept())  # the confirm() of Cancel, Fail
        opened.goto(f"{live.url}/runs")
        assert "/login" in opened.url
        shoot(opened, "login")
        opened.fill("input[name=token]", live.keys.write)
        opened.click("form.login button")
        opened.wait_for_url(f"{live.url}/runs")
        yield opened
        browser.close()


def settle_off_loop(app: Any, *run_ids: str) -> None:
    """`settle` on a thread of its own: Playwright's sync API keeps an event loop running on
    this one, and the worker runs its own."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(settle, app, *run_ids).result()


def idle_off_loop(app: Any) -> None:
    with ThreadPoolExecutor(1) as pool:
        pool.submit(app.run_until_idle).result()


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_dead_letter_is_retried_from_the_dashboard(
    live: Live, page: Any, payments: Payments
) -> None:
    app = live.app
    payments.down = True
    app.start("checkout", "o-1", 12, id="o-1", correlation_id="req-1")
    settle_off_loop(app, "o-1")

    page.goto(f"{live.url}/dead-letters")
    row = page.locator("tr[data-run='o-1']")
    assert "ConnectionError: payments unreachable" in row.inner_text()
    assert "attempts exhausted" in row.inner_text()
    shoot(page, "dead-letters")

    page.click("tr[data-run='o-1'] >> text=o-1")
    now = page.get_by_test_id("now").inner_text()
    assert "parked for a person after 2 attempt(s): step charge failed" in now
    assert "ConnectionError: payments unreachable" in now
    assert "Root cause: step charge failed" in page.get_by_test_id("root-cause").inner_text()
    assert page.locator(".gantt .bar.failed").count() == 2  # both attempts, on the time axis
    assert "lost with its worker" in page.get_by_test_id("legend").inner_text()
    assert page.get_by_test_id("axis").inner_text().startswith("0 s")
    raised = page.locator("tr.kind-attempt_failed details.traceback")
    raised.locator("summary").click()  # where the first attempt raised, folded until asked
    assert 'raise ConnectionError("payments unreachable")' in raised.locator("pre").inner_text()
    shoot(page, "run-parked")

    payments.down = False  # the fault is fixed
    page.get_by_test_id("retry").click()
    assert "is pending again" in page.locator(".said").inner_text()
    settle_off_loop(app, "o-1")
    page.reload()
    assert page.locator("h1 .badge").inner_text() == "completed"
    assert page.get_by_test_id("now").inner_text().startswith("Now: completed at ")
    assert payments.charged == ["o-1"]
    shoot(page, "run-completed")

    page.goto(f"{live.url}/runs?q=req-1")  # found by its correlation id
    assert page.locator("table.runs tbody tr").count() == 1
    assert "o-1" in page.locator("table.runs").inner_text()
    page.goto(f"{live.url}/runs")
    shoot(page, "runs")


def test_an_approval_is_approved_and_a_run_cancelled(live: Live, page: Any) -> None:
    app = live.app
    app.start("refund", "o-2", id="o-2")
    app.start("deliver", "o-3", id="o-3")
    idle_off_loop(app)

    page.goto(f"{live.url}/approvals")
    assert "refund" in page.locator("tr[data-run='o-2']").inner_text()
    shoot(page, "approvals")
    page.fill("tr[data-run='o-2'] input[name=comment]", "fine by me")
    page.click("tr[data-run='o-2'] >> text=Approve")
    assert "approved 'refund' of run o-2" in page.locator(".said").inner_text()
    settle_off_loop(app, "o-2")
    assert app.client.get("o-2").result == '"refunded"'

    page.goto(f"{live.url}/runs/o-3")
    assert "waiting for signal 'address'" in page.get_by_test_id("now").inner_text()
    shoot(page, "run-waiting")
    page.get_by_test_id("cancel").click()
    page.wait_for_selector(".said")
    settle_off_loop(app, "o-3")
    page.goto(f"{live.url}/runs/o-3")
    assert page.locator("h1 .badge").inner_text() == "cancelled"
    shoot(page, "run-cancelled")

    for name in ("breakers", "queues", "workers", "schedules"):
        page.goto(f"{live.url}/{name}")
        assert page.locator("h1").count() == 1
        shoot(page, name)


def test_the_runs_page_is_filtered_by_an_attribute_key_queue_and_dates(
    live: Live, page: Any
) -> None:
    app = live.app
    app.queue("emails")
    app.start("refund", "o-5", id="o-5", attributes={"customer": "42", "plan": "pro"})
    app.start("refund", "o-6", id="o-6", attributes={"customer": "42"}, key="t-1")
    app.start("refund", "o-7", id="o-7", attributes={"customer": "7"}, queue="emails")
    rows = page.locator("table.runs tbody tr")

    page.goto(f"{live.url}/runs")
    page.fill("input[name=attr]", "customer:42")
    page.click("form.filters button")
    page.wait_for_url("**/runs?*attr=customer%3A42*")
    assert [text.split()[0] for text in sorted(rows.all_inner_texts())] == ["o-5", "o-6"]
    assert "plan=pro" in page.locator("tr", has_text="o-5").inner_text()
    shoot(page, "runs-by-attribute")
    page.fill("input[name=key]", "t-1")
    page.click("form.filters button")
    assert [text.split()[0] for text in rows.all_inner_texts()] == ["o-6"]

    page.goto(f"{live.url}/runs?queue=emails&since=1h")
    assert [text.split()[0] for text in rows.all_inner_texts()] == ["o-7"]
    page.goto(f"{live.url}/runs?attr=customer:42&until=2000-01-01")
    assert "No run matches." in rows.first.inner_text()
    page.goto(f"{live.url}/runs?attr=customer")  # no value: said, not failed
    assert "is not an attribute: write name=value" in page.locator(".refused").inner_text()

    page.goto(f"{live.url}/runs/o-5")  # a run's attributes, each a link to the runs sharing it
    assert page.get_by_test_id("attributes").inner_text().split() == ["customer=42", "plan=pro"]
    page.get_by_test_id("attributes").get_by_text("customer=42").click()
    page.wait_for_url("**/runs?attr=customer%3A42")
    assert [text.split()[0] for text in sorted(rows.all_inner_texts())] == ["o-5", "o-6"]


def test_forms_need_the_sessions_csrf_token_and_a_write_role(live: Live) -> None:
    live.app.start("deliver", "o-4", id="o-4")
    live.app.run_until_idle()
    with httpx.Client(base_url=live.url, follow_redirects=False) as web:
        anonymous = web.post("/runs/o-4/cancel", data={"csrf": "x"})
        assert anonymous.status_code == 303
        assert anonymous.headers["location"].startswith("/login")
        web.post("/login", data={"token": live.keys.write, "next": "/runs"})
        forged = web.post("/runs/o-4/cancel", data={"csrf": "forged", "back": "/runs/o-4"})
        assert "CSRF" in forged.headers["location"].replace("+", " ")
    with httpx.Client(base_url=live.url, follow_redirects=False) as web:
        web.post("/login", data={"token": live.keys.read, "next": "/runs"})
        page = web.get("/runs/o-4").text
        assert 'data-testid="cancel"' not in page  # a reader is shown no action
        bad = web.post("/login", data={"token": "nope"})
        assert "refused=" in bad.headers["location"]
    assert live.app.client.get("o-4").status.value == "pending"  # nothing was cancelled


# -- bulk actions ---------------------------------------------------------------------------

WAIT_MS = 20_000  # for a job's page to show it finished: it refreshes each second


def test_runs_are_selected_and_cancelled_from_the_runs_list(live: Live, page: Any) -> None:
    app = live.app
    for order in ("d1", "d2", "d3"):
        app.start("deliver", order, id=order)
    idle_off_loop(app)  # each waits for its address
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.message))

    page.goto(f"{live.url}/runs?workflow=deliver")
    assert page.get_by_test_id("act-selected").is_disabled()  # nothing ticked yet
    page.check("tr[data-run='d1'] input[name=ids]")
    page.check("tr[data-run='d3'] input[name=ids]")
    assert page.get_by_test_id("act-selected").inner_text() == "… the selected (2)"
    page.select_option("select[name=action]", "cancel")
    page.fill("#bulk input[name=reason]", "wrong address")
    shoot(page, "runs-selected")
    page.get_by_test_id("act-selected").click()
    page.wait_for_url(f"{live.url}/bulk/*")

    assert asked == ["Cancel the 2 selected run(s)?"]
    assert "cancel of 2 run(s) under way" in page.locator(".said").inner_text()
    page.wait_for_selector("[data-testid=job-state]:has-text('finished')", timeout=WAIT_MS)
    assert (
        "2 of 2 run(s) done: 2 cancelled, 0 skipped" in page.get_by_test_id("progress").inner_text()
    )
    shoot(page, "bulk-job")
    settle_off_loop(app, "d1", "d3")
    assert [app.client.get(r).status for r in ("d1", "d2", "d3")] == [
        RunStatus.CANCELLED,
        RunStatus.PENDING,
        RunStatus.CANCELLED,
    ]
    cancels = [e for e in app.client.audit().entries if e.action == "cancel"]
    assert {(e.run_id, e.by, e.via) for e in cancels} == {
        ("d1", "erin", "dashboard"),
        ("d3", "erin", "dashboard"),
    }
    [job] = app.client.bulk.jobs()
    assert {json.loads(e.detail or "{}")["job"] for e in cancels} == {job.id}

    page.goto(f"{live.url}/runs?workflow=deliver")  # now every run matching the filter
    assert page.get_by_test_id("act-matching").inner_text() == "… all 3 matching this filter"
    page.select_option("select[name=action]", "pause")
    page.fill("#bulk input[name=reason]", "")
    page.get_by_test_id("act-matching").click()
    page.wait_for_url(f"{live.url}/bulk/*")
    page.wait_for_selector("[data-testid=job-state]:has-text('finished')", timeout=WAIT_MS)

    assert asked[-1] == "Pause all 3 run(s) matching this filter?"
    assert "3 of 3 run(s) done: 1 paused, 2 skipped" in page.get_by_test_id("progress").inner_text()
    assert "it is cancelled: a pause acts on runs that are pending, running" in (
        page.locator("tr[data-run='d1']").inner_text()
    )
    page.goto(f"{live.url}/bulk")
    assert page.locator("tr[data-job]").count() == 2
    shoot(page, "bulk-jobs")


def test_the_bar_needs_the_sessions_csrf_token_and_a_write_role(live: Live) -> None:
    live.app.start("deliver", "d1", id="d1")
    live.app.run_until_idle()
    form = {"action": "cancel", "scope": "selected", "ids": "d1", "back": "/runs"}
    with httpx.Client(base_url=live.url, follow_redirects=False) as web:
        assert web.post("/runs/bulk", data=form).headers["location"].startswith("/login")
        web.post("/login", data={"token": live.keys.write, "next": "/runs"})
        forged = web.post("/runs/bulk", data={**form, "csrf": "forged"})
        assert "CSRF" in forged.headers["location"].replace("+", " ")
    with httpx.Client(base_url=live.url, follow_redirects=False) as web:
        web.post("/login", data={"token": live.keys.read, "next": "/runs"})
        assert 'id="bulk"' not in web.get("/runs").text  # a reader is shown no bar
    assert live.app.client.bulk.jobs() == []
