"""Webhooks through the HTTP API, against the real server on both stores: a write token adds,
lists, removes webhooks and reads and retries their deliveries; the secret is never shown;
bad input is refused by name (422), unknown ids are 404, a retry of a delivery that is not
dead is 409; a read token is refused every route (a URL may carry a receiver's credential)."""

from __future__ import annotations

import httpx

from .conftest import Live


def test_a_webhook_is_added_listed_and_removed(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        made = web.post(
            "/api/webhooks",
            json={
                "url": "https://hooks.example.com/durably",
                "events": ["run_failed", "needs_attention"],
                "secret": "whsec_abc",
                "workflow": "checkout",
            },
        )
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["events"] == ["run_failed", "needs_attention"]
        assert (body["signed"], body["workflow"], body["attempts"]) == (True, "checkout", 8)
        listed = web.get("/api/webhooks")
        assert [hook["id"] for hook in listed.json()] == [body["id"]]
        assert "whsec_abc" not in listed.text
        assert web.delete(f"/api/webhooks/{body['id']}").status_code == 204
        gone = web.delete(f"/api/webhooks/{body['id']}")
        assert gone.status_code == 404
        assert body["id"] in gone.json()["message"]
        assert web.get("/api/webhooks").json() == []
    trail = live.app.client.audit(limit=10).entries
    assert [(e.action, e.by, e.via) for e in trail] == [
        ("remove_webhook", "erin", "api"),
        ("add_webhook", "erin", "api"),
    ]
    assert "hooks.example.com" not in (trail[1].detail or "")  # a URL may hold a credential


def test_bad_webhooks_are_refused_by_name(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        unknown = web.post(
            "/api/webhooks", json={"url": "https://h.example.com/", "events": ["run_exploded"]}
        )
        assert unknown.status_code == 422
        assert "'run_exploded'" in unknown.json()["message"]
        assert "run_completed" in unknown.json()["message"]
        scheme = web.post(
            "/api/webhooks", json={"url": "file:///etc/passwd", "events": ["run_failed"]}
        )
        assert scheme.status_code == 422
        assert "scheme 'file'" in scheme.json()["message"]
        extra = web.post("/api/webhooks", json={"url": "https://h.example.com/", "event": []})
        assert extra.status_code == 422
        assert "events is required" in extra.json()["message"]
        assert web.get("/api/webhooks/deliveries?webhook=wh_nope").status_code == 404
        missing = web.post("/api/webhooks/deliveries/99999/retry")
        assert missing.status_code == 404
        assert "99999" in missing.json()["message"]


def test_a_dead_delivery_is_listed_and_retried(live: Live) -> None:
    app = live.app
    hook = app.client.webhooks.add("http://127.0.0.1:9/refused", ["run_completed"], attempts=1)
    app.start("checkout", "o-1", 5, id="o-1")
    app.run_until_idle()
    assert app.client.webhooks.deliver().dead == 1  # nothing listens on port 9

    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        dead = web.get("/api/webhooks/deliveries", params={"failed": True}).json()
        assert [(d["webhook"], d["run_id"], d["state"]) for d in dead] == [(hook.id, "o-1", "dead")]
        retried = web.post(f"/api/webhooks/deliveries/{dead[0]['id']}/retry")
        assert retried.status_code == 202, retried.text
        assert retried.json() == {"delivery": dead[0]["id"], "state": "due"}
        again = web.post(f"/api/webhooks/deliveries/{dead[0]['id']}/retry")
        assert again.status_code == 409
        assert "is not dead" in again.json()["message"]
        assert web.get("/api/webhooks/deliveries", params={"failed": True}).json() == []


def test_a_read_token_is_refused(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers(live.keys.read)) as web:
        for answer in (
            web.get("/api/webhooks"),
            web.get("/api/webhooks/deliveries"),
            web.post("/api/webhooks", json={"url": "https://h.example.com/", "events": ["x"]}),
            web.delete("/api/webhooks/wh_a"),
        ):
            assert answer.status_code == 403, answer.text
