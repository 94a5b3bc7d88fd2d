"""Custom attributes through the HTTP API, against the real server on both stores: a start
records them (and refuses a secret-looking name, writing nothing), a run shows them, and
`GET /api/runs` finds runs by attribute (`attr=name:value`, repeated: each must match), key
and queue, with every other filter and the cursor."""

from __future__ import annotations

import httpx

from .conftest import Live


def test_a_start_records_attributes_and_the_run_shows_them(live: Live) -> None:
    body = {"workflow": "checkout", "input": ["o-1", 5], "id": "o-1"}
    given = {"customer": "42", "city": "Zürich"}
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        made = web.post("/api/runs", json={**body, "attributes": given})
        assert made.status_code == 201, made.text
        assert made.json()["attributes"] == given
        assert (made.json()["queue"], made.json()["key"]) == ("default", None)
        assert web.get("/api/runs/o-1").json()["attributes"] == given
        again = web.post("/api/runs", json={**body, "attributes": {"customer": "7"}})
        assert (again.status_code, again.json()["attributes"]) == (200, given)  # kept

        for attributes, said in [
            ({"api_key": "k-1"}, "stored unencrypted"),
            ({"customer": 42}, "attributes.customer"),
            ({"customer": "4\u00002"}, "control character"),
            ({"a:b": "1"}, "cannot hold ':'"),
            ({f"n{i}": "v" for i in range(21)}, "attributes"),
        ]:
            refused = web.post("/api/runs", json={**body, "id": "o-2", "attributes": attributes})
            assert refused.status_code == 422, refused.text
            assert said in refused.json()["message"], refused.text
        assert web.get("/api/runs/o-2").status_code == 404  # nothing stored


def test_runs_are_found_by_attribute_key_and_queue(live: Live) -> None:
    app = live.app
    app.queue("emails")
    app.start("checkout", "o-1", 1, id="o-1", attributes={"customer": "42", "plan": "pro"})
    app.start("checkout", "o-2", 2, id="o-2", attributes={"customer": "42"}, key="t-1")
    app.start("checkout", "o-3", 3, id="o-3", attributes={"customer": "7"}, queue="emails")
    app.start("refund", "o-4", id="o-4", attributes={"customer": "42"})

    def found(**params: object) -> list[str]:
        page = web.get("/api/runs", params=params)  # type: ignore[arg-type]
        assert page.status_code == 200, page.text
        return sorted(run["id"] for run in page.json()["runs"])

    with httpx.Client(base_url=live.url, headers=live.headers(live.keys.read)) as web:
        assert found(attr="customer:42") == ["o-1", "o-2", "o-4"]
        assert found(attr="customer=42") == ["o-1", "o-2", "o-4"]
        assert found(attr=["customer:42", "plan:pro"]) == ["o-1"]
        assert found(attr="customer:42", workflow="checkout") == ["o-1", "o-2"]
        assert found(attr="customer:42", key="t-1") == ["o-2"]
        assert found(queue="emails") == ["o-3"]
        assert found(queue="default", attr="customer:7") == []
        assert found(attr="customer:42", status="completed") == []
        first = web.get("/api/runs", params={"attr": "customer:42", "limit": 2}).json()
        rest = web.get("/api/runs", params={"attr": "customer:42", "cursor": first["next_cursor"]})
        paged = [run["id"] for run in first["runs"] + rest.json()["runs"]]
        assert sorted(paged) == ["o-1", "o-2", "o-4"]
        shown = {run["id"]: run for run in first["runs"] + rest.json()["runs"]}
        assert shown["o-2"]["attributes"] == {"customer": "42"}
        assert shown["o-2"]["key"] == "t-1"

        no_value = web.get("/api/runs", params={"attr": "customer"})
        assert no_value.status_code == 422
        assert "attr 'customer' is not an attribute: write name=value" in no_value.text
        many = web.get("/api/runs", params={"attr": [f"n{i}:v" for i in range(21)]})
        assert many.status_code == 422, many.text
        assert "attr" in many.json()["message"]
