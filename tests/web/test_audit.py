"""The audit trail on the real server: an action through the API is recorded as its token's,
through the dashboard as the person's who logged in (logins and logouts too); GET /api/audit
and the dashboard's Audit page show it to a token holder only, even on a server whose reads
are open."""

from __future__ import annotations

import re

import httpx

from .conftest import Keys, Live, serving


def test_an_api_action_is_recorded_as_its_tokens_and_read_with_a_token(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        made = web.post(
            "/api/runs", json={"workflow": "checkout", "input": ["o-1", 5], "id": "o-1"}
        )
        assert made.status_code == 201, made.text
        cancelled = web.post("/api/runs/o-1/cancel", json={"reason": "a test order"})
        assert cancelled.status_code == 200, cancelled.text

    as_reader = httpx.get(f"{live.url}/api/audit", headers=live.headers(live.keys.read))
    assert as_reader.status_code == 200, as_reader.text  # a read token may audit
    cancel, start = as_reader.json()["entries"]
    assert (cancel["by"], cancel["action"], cancel["via"], cancel["run"]) == (
        "erin",
        "cancel",
        "api",
        "o-1",
    )
    assert cancel["workflow"] == "checkout"
    assert cancel["detail"] == {"reason": "a test order"}
    assert (start["by"], start["action"], start["detail"]) == ("erin", "start", {})

    page = httpx.get(
        f"{live.url}/api/audit", params={"by": "erin", "limit": 1}, headers=live.headers()
    ).json()
    assert [e["action"] for e in page["entries"]] == ["cancel"]
    rest = httpx.get(
        f"{live.url}/api/audit", params={"cursor": page["next_cursor"]}, headers=live.headers()
    ).json()
    assert ([e["action"] for e in rest["entries"]], rest["next_cursor"]) == (["start"], None)
    bad = httpx.get(
        f"{live.url}/api/audit", params={"since": "2026-01-01T00:00"}, headers=live.headers()
    )
    assert bad.status_code == 422
    assert "time zone" in bad.json()["message"]


def test_the_trail_needs_a_token_even_when_reads_are_open(live: Live, keys: Keys) -> None:
    with serving(live.app, keys, open_reads=True) as open_server:
        assert httpx.get(f"{open_server.url}/api/runs").status_code == 200  # open
        refused = httpx.get(f"{open_server.url}/api/audit")
        assert refused.status_code == 401
        assert "needs a token" in refused.json()["message"]
        page = httpx.get(f"{open_server.url}/audit", follow_redirects=False)
        assert (page.status_code, page.headers["location"]) == (303, "/login?next=/audit")


def test_dashboard_logins_actions_and_logouts_are_recorded(live: Live) -> None:
    live.app.client.start("checkout", ["o-2", 5], id="o-2")  # the app's own: not recorded
    with httpx.Client(base_url=live.url, follow_redirects=False) as web:
        web.post("/login", data={"token": live.keys.write, "next": "/runs"})
        csrf = _csrf(web.get("/runs/o-2").text)
        paused = web.post("/runs/o-2/pause", data={"csrf": csrf, "back": "/runs/o-2"})
        assert "said=" in paused.headers["location"], paused.headers["location"]
        page = web.get("/audit?by=erin").text
        assert "<td>pause</td>" in page
        assert "<td>dashboard</td>" in page
        assert 'href="/runs/o-2"' in page
        refused = web.get("/audit?since=last+week").text
        assert "neither a duration back from now" in refused
        web.post("/logout", data={"csrf": _csrf(page)})

    entries = live.app.client.audit().entries
    assert [(e.action, e.by, e.via, e.run_id) for e in reversed(entries)] == [
        ("login", "erin", "dashboard", None),
        ("pause", "erin", "dashboard", "o-2"),
        ("logout", "erin", "dashboard", None),
    ]


def _csrf(page: str) -> str:
    return re.findall(r'name="csrf" value="([^"]+)"', page)[0]
