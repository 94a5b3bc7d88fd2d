"""A body that does not fit is refused 422 with a message naming what is wrong, by every API
route that takes one (listed from the server's own schema, so a new route cannot be left
out), before the route reads the store: a body that is not JSON, one with a field the route
does not know, one with a field of the wrong type. None of them is a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from .conftest import Live

WRONG = {"string": 12345, "integer": "many", "number": "much", "boolean": "perhaps"}
WRONG_ELSE = 7  # an array or an object given a number


def with_bodies(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, path, the body's schema) of every operation that takes a JSON body."""
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                filled = path.replace("{run_id}", "o-1").replace("{name}", "approval")
                yield method.upper(), filled, _model(spec, body["schema"])


def test_a_body_that_is_not_json_is_refused_naming_why(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        spec = web.get("/api/openapi.json").json()
        operations = list(with_bodies(spec))
        assert len(operations) >= 10
        for method, path, _ in operations:
            broken = b'{"reason": '
            answer = web.request(
                method, path, content=broken, headers={"Content-Type": "application/json"}
            )
            where = f"{method} {path}: {answer.status_code} {answer.text}"
            assert answer.status_code == 422, where
            assert "the body is not valid JSON" in answer.json()["message"], where


def test_an_unknown_field_is_refused_by_its_name(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        spec = web.get("/api/openapi.json").json()
        for method, path, model in with_bodies(spec):
            assert model.get("additionalProperties") is False, f"{path} takes any field"
            body = {**_minimal(spec, model), "colour": "red"}
            answer = web.request(method, path, json=body)
            where = f"{method} {path}: {answer.status_code} {answer.text}"
            assert answer.status_code == 422, where
            assert "colour is not a field of this request" in answer.json()["message"], where


def test_a_field_of_the_wrong_type_is_refused_by_its_name(live: Live) -> None:
    checked = 0
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        spec = web.get("/api/openapi.json").json()
        for method, path, model in with_bodies(spec):
            for field, schema in model.get("properties", {}).items():
                kind = _type(spec, schema)
                if kind is None:  # any JSON value fits (an input, a result)
                    continue
                body = {**_minimal(spec, model), field: WRONG.get(kind, WRONG_ELSE)}
                answer = web.request(method, path, json=body)
                where = f"{method} {path} {field}: {answer.status_code} {answer.text}"
                assert answer.status_code == 422, where
                assert answer.json()["message"].startswith(f"{field}:"), where
                checked += 1
    assert checked >= 10


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _model(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The object schema of a body (an optional body is `anyOf` it and null)."""
    for choice in schema.get("anyOf", [schema]):
        resolved = _resolve(spec, choice)
        if resolved.get("type") == "object":
            return resolved
    raise AssertionError(f"no object schema in {schema}")


def _type(spec: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The JSON type a field takes (None: any), its null choice aside."""
    kinds = [
        _resolve(spec, choice).get("type")
        for choice in schema.get("anyOf", [schema])
        if choice.get("type") != "null"
    ]
    return kinds[0] if len(kinds) == 1 and kinds[0] is not None else None


def _minimal(spec: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """The required fields of a body, each with a value of its type (one of its choices)."""
    fitting = {"string": "checkout", "integer": 1, "number": 1, "boolean": True, "array": []}
    body = {}
    for field in model.get("required", []):
        schema = _resolve(spec, model["properties"][field])
        choices = schema.get("enum")
        body[field] = choices[0] if choices else fitting.get(_type(spec, schema) or "")
    return body
