"""The HTTP API against the real server (uvicorn on loopback) on both stores: every route a
person or another service uses, its auth, and its JSON errors. Runs move on by a worker of
the test process (run_until_idle) between requests."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import httpx

import durably
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import Keys, Live, serving, settle
from .shop import Payments


def test_health_is_open_and_everything_else_needs_a_token(live: Live) -> None:
    with httpx.Client(base_url=live.url) as web:
        assert web.get("/api/health").json() == {"status": "ok"}
        assert web.get("/api/ready").json() == {"status": "ready"}
        refused = web.get("/api/runs")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer TOKEN" in refused.json()["message"]
        wrong = web.get("/api/runs", headers={"Authorization": "Bearer nope"})
        assert (wrong.status_code, wrong.json()["error"]) == (401, "unauthorized")
        reader = live.headers(live.keys.read)
        assert web.get("/api/runs", headers=reader).status_code == 200
        body = {"workflow": "checkout", "input": ["o-1", 5]}
        forbidden = web.post("/api/runs", json=body, headers=reader)
        assert forbidden.status_code == 403
        assert "rita" in forbidden.json()["message"]
        assert web.get("/api/runs").status_code == 401
        assert live.app.client.runs().runs == []  # nothing was started by the refused calls


def test_start_is_idempotent_on_id_and_errors_name_what_is_wrong(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        body = {
            "workflow": "checkout",
            "input": ["o-1", 5],
            "id": "o-1",
            "correlation_id": "req-1",
            "priority": 3,
        }
        made = web.post("/api/runs", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["id"] == "o-1"
        assert made.json()["correlation_id"] == "req-1"
        assert made.json()["now"].startswith("queued: due since ")  # said, not null
        assert made.json()["next"].startswith("no live worker runs workflow 'checkout'")
        again = web.post("/api/runs", json=body)
        assert (again.status_code, again.json()["id"]) == (200, "o-1")
        other = web.post("/api/runs", json={**body, "input": ["o-1", 6]})
        assert (other.status_code, other.json()["error"]) == (409, "conflict")
        unknown = web.post("/api/runs", json={"workflow": "nope"})
        assert unknown.status_code == 404
        assert "no workflow named 'nope'" in unknown.json()["message"]
        for bad_id in ("o\u0000-3", "o/3"):  # a NUL PostgreSQL refuses; a '/' no path names
            refused = web.post("/api/runs", json={**body, "id": bad_id})
            assert refused.status_code == 422, refused.text
            assert "id" in refused.json()["message"]
        nan = web.post(
            "/api/runs",
            content='{"workflow": "checkout", "input": ["o-4", NaN]}',
            headers={"Content-Type": "application/json"},
        )
        assert nan.status_code == 422, nan.text
        assert web.get("/api/runs/o-4").status_code == 404  # nothing stored
        typed = web.post("/api/runs", json={"workflow": "checkout", "input": ["o-2", "five"]})
        assert typed.status_code == 422
        assert "input.total" in typed.json()["message"]
        missing = web.post("/api/runs", json={"input": []})
        assert missing.json() == {"error": "validation", "message": "workflow is required"}
        blank = web.post("/api/runs", json={**body, "id": "o-2", "correlation_id": "a\tb"})
        assert blank.status_code == 422
        assert "printable" in blank.json()["message"]
        extra = web.post("/api/runs", json={"workflow": "checkout", "colour": "red"})
        assert "colour is not a field" in extra.json()["message"]
        json_type = {"content-type": "application/json"}
        broken = web.post("/api/runs", content=b'{"workflow": ', headers=json_type)
        assert broken.status_code == 422
        assert "not valid JSON" in broken.json()["message"]
        assert [run.id for run in live.app.client.runs().runs] == ["o-1"]


def test_a_run_its_history_and_pages_of_runs(live: Live) -> None:
    app = live.app
    for n in range(5):
        app.start("checkout", f"o-{n}", n, id=f"o-{n}", correlation_id="batch" if n < 2 else None)
    app.run_until_idle()
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        run = web.get("/api/runs/o-1").json()
        assert run["status"] == "completed"
        assert run["result"] == "ch-o-1"
        assert run["now"].startswith("completed at ")
        assert run["next"] == "nothing more happens"
        events = web.get("/api/runs/o-1/history").json()["events"]
        kinds = [event["kind"] for event in events]
        assert kinds[0] == "run_started"
        assert kinds[-1] == "run_completed"
        [done] = [event for event in events if event["kind"] == "step_completed"]
        assert done["data"] == "ch-o-1"
        assert done["duration_ms"] is not None
        seen, cursor = [], None
        while True:
            at = {"cursor": cursor} if cursor else {}
            page = web.get("/api/runs", params={"limit": 2, **at}).json()
            assert all(r["now"].startswith("completed at ") for r in page["runs"])
            seen += [r["id"] for r in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert web.get("/api/runs", params={"happened": "retried"}).json()["runs"] == []
        found = {"since": "2020-01-01T00:00:00+00:00", "slower_than": "0s", "workflow": "checkout"}
        assert web.get("/api/runs", params=found).json()["runs"] == []  # took no time at all
        del found["slower_than"]
        assert len(web.get("/api/runs", params=found).json()["runs"]) == 5
        wrong = web.get("/api/runs", params={"happened": "lost"})
        assert wrong.status_code == 422, wrong.text
        assert "happened" in wrong.text
        assert sorted(seen) == [f"o-{n}" for n in range(5)]
        batch = web.get("/api/runs", params={"correlation_id": "batch"}).json()["runs"]
        assert sorted(r["id"] for r in batch) == ["o-0", "o-1"]
        assert web.get("/api/runs", params={"status": "pending"}).json()["runs"] == []
        bad = web.get("/api/runs", params={"status": "asleep"})
        assert bad.status_code == 422
        assert "status" in bad.json()["message"]
        stale = web.get("/api/runs", params={"cursor": "not-a-cursor"})
        assert stale.status_code == 422
        assert "cursor" in stale.json()["message"]
        gone = web.get("/api/runs/nobody")
        assert (gone.status_code, gone.json()["error"]) == (404, "not_found")
        assert web.get("/api/runs/nobody/history").status_code == 404


def test_a_dead_letter_is_retried_after_the_fault_is_fixed(live: Live, payments: Payments) -> None:
    app = live.app
    payments.down = True
    app.start("checkout", "o-9", 9, id="o-9")
    settle(app, "o-9")
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        [letter] = web.get("/api/dead-letters").json()
        assert letter["run"] == "o-9"
        assert letter["step"] == "charge"
        assert letter["error"] == {
            "error_class": "ConnectionError",
            "message": "payments unreachable",
        }
        assert letter["reason"] == "attempts exhausted"
        run = web.get("/api/runs/o-9").json()
        assert run["now"].startswith("parked for a person after 2 attempt(s): step charge failed")
        history = web.get("/api/runs/o-9/history").json()["events"]
        raised = [e["traceback"] for e in history if e["traceback"]]
        assert len(raised) == 2  # each attempt's, where the step raised
        assert all('raise ConnectionError("payments unreachable")' in t for t in raised)
        assert all("in charge" in t and "durably/runtime" not in t for t in raised)
        payments.down = False
        retried = web.post("/api/runs/o-9/retry", json={})
        assert retried.status_code == 200, retried.text
        app.run_until_idle()
        assert web.get("/api/runs/o-9").json()["status"] == "completed"
        again = web.post("/api/runs/o-9/retry", json={})
        assert (again.status_code, again.json()["error"]) == (409, "refused")
    [retry] = [e for e in app.client.history("o-9") if e.kind is EventKind.RUN_RETRIED]
    assert json.loads(retry.data or "{}")["by"] == "erin"  # the token's name acted


def test_skip_and_fail_a_dead_letter(live: Live, payments: Payments) -> None:
    app = live.app
    payments.down = True
    app.start("checkout", "o-s", 1, id="o-s")
    app.start("checkout", "o-f", 1, id="o-f")
    settle(app, "o-s", "o-f")
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        wrong = web.post("/api/runs/o-s/skip", json={"result": 5})
        assert wrong.status_code == 422, wrong.text  # charge returns a str
        assert web.post("/api/runs/o-s/skip", json={"result": "manual"}).status_code == 200
        no_reason = web.post("/api/runs/o-f/fail", json={})
        assert no_reason.status_code == 422
        assert "reason is required" in no_reason.json()["message"]
        assert web.post("/api/runs/o-f/fail", json={"reason": "customer left"}).status_code == 200
        app.run_until_idle()
        assert web.get("/api/runs/o-s").json()["result"] == "manual"
        failed = web.get("/api/runs/o-f").json()
        assert failed["status"] == "failed"
        assert "customer left" in failed["error"]["message"]


def test_approvals_signals_cancel_pause_and_restart(live: Live) -> None:
    app = live.app
    app.start("refund", "o-r", id="o-r")
    app.start("refund", "o-x", id="o-x")
    app.start("deliver", "o-d", id="o-d")
    app.start("deliver", "o-c", id="o-c")
    app.run_until_idle()
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        waiting = web.get("/api/approvals").json()
        assert sorted(a["run"] for a in waiting) == ["o-r", "o-x"]
        assert waiting[0]["details"] == {"order": waiting[0]["run"]}
        approved = web.post("/api/runs/o-r/approvals/refund/approve", json={"comment": "ok"})
        assert approved.status_code == 200, approved.text
        assert web.post("/api/runs/o-x/approvals/refund/reject", json={}).status_code == 200
        unknown = web.post("/api/runs/o-x/approvals/nothing/approve", json={})
        assert unknown.status_code in (404, 409), unknown.text
        sent = web.post("/api/runs/o-d/signals/address", json={"data": "Main St 1"})
        assert sent.status_code == 202
        assert sent.json()["stored"] is True
        paused = web.post("/api/runs/o-c/pause", json={"reason": "hold"})
        assert paused.json()["action"] == "pause"
        app.run_until_idle()
        assert web.get("/api/runs/o-c").json()["status"] == "paused"
        assert web.post("/api/runs/o-c/resume").status_code == 200  # no body: none needed
        cancelled = web.post("/api/runs/o-c/cancel", json={"reason": "no address"})
        assert cancelled.status_code == 200, cancelled.text
        app.run_until_idle()
        assert web.get("/api/runs/o-r").json()["result"] == "refunded"
        assert web.get("/api/runs/o-x").json()["result"] == "kept"
        assert web.get("/api/runs/o-d").json()["result"] == "o-d to Main St 1"
        assert web.get("/api/runs/o-c").json()["status"] == "cancelled"
        late = web.post("/api/runs/o-d/signals/address", json={"data": "again"})
        assert late.status_code == 409
        assert "completed" in late.json()["message"]
        restarted = web.post("/api/runs/o-d/restart", json={"from_step": 0, "id": "o-d2"})
        assert restarted.status_code == 201, restarted.text
        assert restarted.json()["id"] == "o-d2"


def test_operations_lists_and_metrics(live: Live, payments: Payments) -> None:
    app = live.app
    payments.down = True
    app.start("checkout", "o-b", 1, id="o-b")
    settle(app, "o-b")
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        [gate] = web.get("/api/breakers").json()
        assert gate["dependency"] == "payments"
        assert gate["breaker"] in ("closed", "open")
        queue = web.get("/api/queue").json()
        assert queue["by_status"] == {"needs_attention": 1}
        assert web.get("/api/workers").json() == [] or isinstance(
            web.get("/api/workers").json(), list
        )
        assert web.get("/api/schedules").json() == []
        metrics = web.get("/metrics")
        assert metrics.status_code == 200
        assert 'durably_runs{status="needs_attention"} 1.0' in metrics.text
        assert 'durably_runs{status="paused"} 0.0' in metrics.text  # zero, not missing
        assert "durably_checkpoint_commit_seconds" not in metrics.text  # the workers' own
        schema = web.get("/api/openapi.json").json()
        assert "/api/runs/{run_id}/retry" in schema["paths"]
        assert "ErrorOut" in schema["components"]["schemas"]


def test_reads_can_be_opened_but_actions_still_need_a_write_token(
    shop: durably.App, keys: Keys
) -> None:
    shop.start("checkout", "o-1", 1, id="o-1")
    with serving(shop, keys, open_reads=True) as live, httpx.Client(base_url=live.url) as web:
        assert web.get("/api/runs/o-1").json()["id"] == "o-1"
        assert web.get("/api/dead-letters").status_code == 200
        assert web.post("/api/runs/o-1/cancel").status_code == 401
        assert web.get("/runs/o-1").status_code == 200  # the dashboard, for anybody to look
        assert 'data-testid="cancel"' not in web.get("/runs/o-1").text


def test_debounced_starts_answer_the_run_their_key_gathers(live: Live) -> None:
    clock = live.app.clock
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        body = {"workflow": "checkout", "debounce": "30s", "debounce_key": "cart-9"}
        made = web.post("/api/runs", json={**body, "input": ["o-1", 5], "max_wait": "5m"})
        assert made.status_code == 201, made.text
        joined = web.post("/api/runs", json={**body, "input": ["o-1", 7]})
        assert joined.status_code == 200, joined.text
        run = joined.json()
        assert run["id"] == made.json()["id"]
        assert (run["status"], run["input"]) == ("pending", {"args": ["o-1", 7], "kwargs": {}})
        assert (run["debounce_key"], run["gathering"], run["gathered"]) == ("cart-9", True, 2)
        first = datetime.fromisoformat(made.json()["created_at"])
        assert datetime.fromisoformat(run["due_by"]) == first + timedelta(minutes=5)
        assert run["now"].startswith("debouncing on 'cart-9': 2 start(s) so far, runs at ")
        refused = web.post("/api/runs", json={**body, "input": ["o-1", 7], "id": "o-1"})
        assert refused.status_code == 422
        assert "cannot name its run's id ('o-1')" in refused.json()["message"]
        bad = web.post("/api/runs", json={**body, "input": ["o-1", 7], "debounce": "soon"})
        assert bad.status_code == 422
        assert "cannot read 'soon' as a duration" in bad.json()["message"]
        assert isinstance(clock, FakeClock)
        clock.advance("30s")
        settle(live.app, run["id"])
        ran = web.get(f"/api/runs/{run['id']}").json()
        assert (ran["status"], ran["gathering"], ran["gathered"]) == ("completed", False, 2)
        audit = web.get("/api/audit", params={"run_id": run["id"]}).json()["entries"]
        assert [(entry["by"], entry["action"]) for entry in audit] == [("erin", "start")] * 2


def test_a_start_names_its_key_and_is_due_later(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        made = web.post(
            "/api/runs",
            json={"workflow": "checkout", "input": ["o-2", 5], "key": "c-42", "delay": "24h"},
        )
        assert made.status_code == 201, made.text
        run = made.json()
        assert (run["status"], run["key"], run["queue"]) == ("pending", "c-42", "default")
        due = datetime.fromisoformat(run["due_at"])
        assert due == datetime.fromisoformat(run["created_at"]) + timedelta(hours=24)
        unknown = web.post(
            "/api/runs", json={"workflow": "checkout", "input": ["o-3", 5], "queue": "nope"}
        )
        assert unknown.status_code in (400, 422), unknown.text
        assert "no queue named 'nope'" in unknown.json()["message"]
