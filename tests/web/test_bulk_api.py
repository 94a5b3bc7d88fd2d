"""Bulk actions through the HTTP API, against the real server on both stores: POST
/api/runs/bulk answers 202 with the job at once and the server runs it in the background;
its progress is read at the job's link; a dry run and a filter with no match make no job;
bad requests are refused by name; only a write token acts; a job left unfinished is resumed
when the server starts."""

from __future__ import annotations

import json
from typing import Any

import httpx

import durably
from durably.core.bulk import RunFilter
from durably.core.status import RunStatus
from tests.integration.steering import wait_until

from .conftest import Keys, Live, serving

DELIVER = {"workflow": "deliver"}


def deliveries(app: durably.App, *orders: str) -> None:
    for order in orders:
        app.start("deliver", order, id=order)
    app.run_until_idle()  # each waits for its address


def finished(web: httpx.Client, link: str) -> dict[str, Any]:
    """The job at `link`, once it is finished (the server runs it in a thread of its own)."""
    wait_until(f"{link} finished", lambda: web.get(link).json()["state"] == "finished")
    job: dict[str, Any] = web.get(link).json()
    return job


def test_runs_are_cancelled_in_bulk_in_the_background(live: Live) -> None:
    app = live.app
    deliveries(app, "d1", "d2", "d3")
    app.start("checkout", "o-1", 5, id="o-1")  # another workflow: not chosen

    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        asked = web.post(
            "/api/runs/bulk",
            json={"action": "cancel", "filter": DELIVER, "reason": "the van broke down"},
        )
        assert asked.status_code == 202, asked.text
        body = asked.json()
        assert (body["action"], body["total"], body["by"], body["via"]) == (
            "cancel",
            3,
            "erin",
            "api",
        )
        assert (body["filter"], body["resumed"]) == (DELIVER, False)
        assert body["link"] == f"/api/runs/bulk/{body['id']}"
        job = finished(web, body["link"])
        assert (job["done"], job["acted"], job["skipped"]) == (3, 3, 0)
        listed = web.get("/api/runs/bulk").json()
        assert [j["id"] for j in listed] == [body["id"]]
        assert web.get(f"{body['link']}/skipped").json() == []
        app.run_until_idle()
        assert {app.client.get(r).status for r in ("d1", "d2", "d3")} == {RunStatus.CANCELLED}
        assert app.client.get("o-1").status is not RunStatus.CANCELLED
        entries = web.get("/api/audit", params={"by": "erin"}).json()["entries"]
        cancels = [e for e in entries if e["action"] == "cancel"]
        assert sorted(e["run"] for e in cancels) == ["d1", "d2", "d3"]
        assert {e["via"] for e in cancels} == {"api"}
        assert {json.dumps(e["detail"]) for e in cancels} == {
            json.dumps({"job": body["id"], "reason": "the van broke down"})
        }


def test_a_dry_run_and_a_filter_with_no_match_make_no_job(live: Live) -> None:
    deliveries(live.app, "d1", "d2")

    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        dry = web.post(
            "/api/runs/bulk", json={"action": "pause", "filter": DELIVER, "dry_run": True}
        )
        assert dry.status_code == 200, dry.text
        assert dry.json() == {
            "action": "pause",
            "filter": DELIVER,
            "matching": 2,
            "fitting": 2,
            "by_status": {"pending": 2},
            "first": ["d1", "d2"],
            "job": None,
        }
        nothing = web.post(
            "/api/runs/bulk", json={"action": "cancel", "filter": {"workflow": "refund"}}
        )
        assert (nothing.status_code, nothing.json()["matching"]) == (200, 0)
        assert web.get("/api/runs/bulk").json() == []
    assert live.app.store.mail(["d1", "d2"]) == {}


def test_bad_requests_are_refused_by_name(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:

        def refused(body: dict[str, Any]) -> str:
            answer = web.post("/api/runs/bulk", json=body)
            assert answer.status_code == 422, answer.text
            message: str = answer.json()["message"]
            return message

        assert "colour is not a field" in refused({"action": "cancel", "colour": "red"})
        assert "filter.colour is not a field" in refused(
            {"action": "cancel", "filter": {"colour": "red"}}
        )
        assert "action: Input should be 'cancel'" in refused({"action": "delete"})
        assert "filter.status: Input should be" in refused(
            {"action": "cancel", "filter": {"status": "lost"}}
        )
        assert "the filter names no runs" in refused({"action": "cancel"})
        assert "a retry takes no reason" in refused(
            {"action": "retry", "filter": DELIVER, "reason": "why not"}
        )
        since = {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
        assert "is not before its until" in refused({"action": "cancel", "filter": since})
        assert "filter.since" in refused(
            {"action": "cancel", "filter": {"since": "2026-01-01T00:00:00"}}
        )
        assert "filter.ids" in refused({"action": "cancel", "filter": {"ids": []}})
        unknown = web.get("/api/runs/bulk/bulk-nope")
        assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")
        assert "no bulk job has the id 'bulk-nope'" in unknown.json()["message"]


def test_only_a_write_token_acts_in_bulk(live: Live) -> None:
    deliveries(live.app, "d1")
    with httpx.Client(base_url=live.url) as web:
        body = {"action": "cancel", "filter": DELIVER}
        assert web.post("/api/runs/bulk", json=body).status_code == 401
        reader = live.headers(live.keys.read)
        assert web.post("/api/runs/bulk", json=body, headers=reader).status_code == 403
        assert web.get("/api/runs/bulk", headers=reader).status_code == 200
    assert live.app.client.bulk.jobs() == []


def test_a_job_left_unfinished_is_resumed_when_the_server_starts(
    shop: durably.App, keys: Keys
) -> None:
    deliveries(shop, "d1", "d2", "d3")
    begun = shop.client.bulk.begin("pause", RunFilter(workflow="deliver"), by="sam")
    assert begun.job is not None  # made, never run: as a server or a CLI that died left it

    with (
        serving(shop, keys) as live,
        httpx.Client(base_url=live.url, headers=live.headers()) as web,
    ):
        job = finished(web, f"/api/runs/bulk/{begun.job.id}")

    assert (job["acted"], job["by"], job["via"]) == (3, "sam", "library")
    shop.run_until_idle()
    assert {shop.client.get(r).status for r in ("d1", "d2", "d3")} == {RunStatus.PAUSED}
