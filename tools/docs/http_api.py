"""The HTTP API's routes, generated into docs/reference/http-api.md from the OpenAPI schema the
server publishes at /api/openapi.json.

`python -m tools.docs.http_api` rewrites the page's generated section (between its two
marker comments); with `--check` it rewrites nothing and exits 1 naming each route or response
shape whose block is missing or stale. `make docs` runs the rewrite.

The schema comes from the server's own app (durably.web.server.create_app), built without
serving and without opening a store. Two things are not in the schema and are derived here:
who may call a route, from its dependencies (durably.web.access.reader / writer); and which of
the errors the schema declares (the router declares them all on every route) a route can
answer: 401 and 429 only with a token to check, 403 only for writers, 503 only where it uses
the store, 404, 409 and 422 only where it also takes a parameter or a body.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fastapi.routing
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from durably.app import App
from durably.web import access
from durably.web.auth import Tokens
from durably.web.server import create_app
from tools.docs import pages
from tools.docs.pages import stale_blocks

__all__ = [
    "BEGIN",
    "END",
    "PAGE",
    "Block",
    "blocks",
    "main",
    "problems",
    "published",
    "render",
    "rewrite",
]

_PURPOSE = "Generate the reference of every HTTP API route into docs/reference/http-api.md."

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "http-api.md"
BEGIN = "<!-- generated: routes -->"
END = pages.END
SECTION = pages.Section(PAGE, BEGIN)

Auth = Literal["none", "read", "write"]
_AUTH = {
    "none": "none.",
    "read": "a token of either role (none if the server runs with `--open-reads`).",
    "write": "a token with the write role (its name is recorded as who acted).",
}
_SHAPES = "Response shapes"
_HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)


@dataclass(frozen=True, slots=True)
class Block:
    """One part of the page: a route (`GET /api/runs`) or a response shape (`RunOut`), the
    group it is listed under, and its text under its heading."""

    group: str
    heading: str
    text: str

    def markdown(self) -> str:
        return f"### {self.heading}\n\n{self.text}\n"


def published() -> FastAPI:
    """The server's app, as `durably server` builds it; nothing is served or opened."""
    with tempfile.TemporaryDirectory() as scratch:  # the store is opened lazily: never here
        return create_app(App(f"sqlite:///{scratch}/unused.db"), tokens=Tokens([]), metrics=False)


def blocks(web: FastAPI | None = None) -> list[Block]:
    """Every route of `web`'s schema (by tag, in the order the tags first appear, each route in
    its order), then every response shape they use, by name."""
    web = web or published()
    spec = web.openapi()
    routes = {(m, r.path): r for r in _api_routes(web) for m in r.methods}
    found: list[Block] = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            route = routes[(method.upper(), path)]
            text = _operation(operation, _auth(route.dependant), _uses_store(route), spec)
            group = (operation.get("tags") or ["other"])[0]
            found.append(Block(group.capitalize(), f"{method.upper()} {path}", text))
    groups = list(dict.fromkeys(block.group for block in found))
    found.sort(key=lambda block: groups.index(block.group))  # stable: routes keep their order
    shapes = sorted(_referenced(spec))
    return found + [Block(_SHAPES, name, _shape(spec, name)) for name in shapes]


def render(web: FastAPI | None = None) -> str:
    """The generated section: what goes between BEGIN and END."""
    web = web or published()
    parts = [
        "\n\nGenerated from the schema the server publishes at `/api/openapi.json`\n"
        f"(title `{web.title}`, version `{web.version}`, OpenAPI {web.openapi_version}).\n"
    ]
    group = None
    for block in blocks(web):
        if block.group != group:
            parts.append(f"\n## {block.group}\n")
            group = block.group
        parts.append("\n" + block.markdown())
    return "".join(parts) + "\n"


def rewrite(page: str, web: FastAPI | None = None) -> str:
    """`page` with its generated section replaced by the reference of `web`'s routes."""
    return SECTION.replace(page, render(web))


def problems(page: str, web: FastAPI | None = None) -> list[str]:
    """What is missing or stale in the page's generated section, a line a route or shape."""
    web = web or published()
    expected = [(block.heading, block.text) for block in blocks(web)]
    found = stale_blocks(expected, _written(SECTION.split(page)[1]), what="route or shape")
    if not found and rewrite(page, web) != page:
        found.append("the generated section is not as rendered (its order, groups or spacing)")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    web = published()
    return SECTION.main(
        argv,
        prog="python -m tools.docs.http_api",
        purpose=_PURPOSE,
        check=lambda page: problems(page, web),
        rewrite=lambda page: rewrite(page, web),
        hint="run `make docs` to generate the HTTP API's reference",
    )


# -- what the schema does not say ---------------------------------------------------------


def _api_routes(web: FastAPI) -> Iterator[Any]:
    """`web`'s routes in the schema, each with its path, methods and dependant as served.
    FastAPI 0.16x includes routers lazily: iter_route_contexts flattens them (older releases
    copy an included router's routes into the app's list)."""
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    routes: Iterable[Any] = web.routes if contexts is None else contexts(web.routes)
    for route in routes:
        original = getattr(route, "original_route", route)
        if isinstance(original, APIRoute) and route.include_in_schema:
            yield route


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    """Every dependency the route's parameters need, however deep."""
    for dependency in dependant.dependencies:
        if dependency.call is not None:
            yield dependency.call
        yield from _calls(dependency)


def _auth(dependant: Dependant) -> Auth:
    calls = set(_calls(dependant))
    return "write" if access.writer in calls else "read" if access.reader in calls else "none"


def _uses_store(route: Any) -> bool:
    return access.served in set(_calls(route.dependant))


def _errors(operation: dict[str, Any], auth: Auth, uses_store: bool) -> list[str]:
    """The error statuses the schema declares for the operation that it can answer."""
    takes_input = bool(operation.get("parameters") or operation.get("requestBody"))
    can = {
        "401": auth != "none",
        "403": auth == "write",
        "404": uses_store and takes_input,
        "409": uses_store and takes_input,
        "422": takes_input,
        "429": auth != "none",  # an address locked out for guessing tokens
        "503": uses_store,
    }
    return [code for code in sorted(operation["responses"]) if can.get(code, False)]


# -- markdown -----------------------------------------------------------------------------


def _operation(operation: dict[str, Any], auth: Auth, uses_store: bool, spec: Any) -> str:
    summary = operation.get("description") or operation["summary"] + "."
    lines = [summary.strip(), "", f"Auth: {_AUTH[auth]}"]
    for where in ("path", "query"):
        params = [p for p in operation.get("parameters", []) if p["in"] == where]
        if params:
            lines += ["", f"{where.capitalize()} parameters:", "", *_params(params, spec)]
    if "requestBody" in operation:
        lines += ["", *_body(operation["requestBody"], spec)]
    lines += ["", "Answers:", ""]
    for code, response in sorted(operation["responses"].items()):
        if code.startswith("2"):
            lines.append(f"- `{code}`{_said(response)}: {_answer(response, spec)}")
    errors = _errors(operation, auth, uses_store)
    if errors:
        codes = ", ".join(f"`{code}`" for code in errors)
        lines += ["", f"Errors ([what each means](#errors)): {codes}."]
    return "\n".join(lines)


def _params(params: list[dict[str, Any]], spec: Any) -> list[str]:
    rows = ["| name | type | constraints | description |", "| --- | --- | --- | --- |"]
    for param in params:
        schema = _not_null(param.get("schema", {}))  # a query sends no null: it leaves it out
        limits = _constraints(schema, required=param.get("required", False))
        text = param.get("description", "")
        rows.append(f"| `{param['name']}` | {_type(schema, spec)} | {limits} | {_cell(text)} |")
    return rows


def _body(body: dict[str, Any], spec: Any) -> list[str]:
    schema = _resolved(body["content"]["application/json"]["schema"], spec)
    required = set(schema.get("required", []))
    needed = "required" if body.get("required") else "optional"
    closed = "; other fields are refused" if schema.get("additionalProperties") is False else ""
    empty = "; `{}` takes every default" if not required else ""
    rows = [
        f"Body (JSON object, {needed}{empty}{closed}):",
        "",
        "| field | type | constraints | description |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in schema.get("properties", {}).items():
        limits = _constraints(field, required=name in required)
        text = field.get("description", "")
        rows.append(f"| `{name}` | {_type(field, spec)} | {limits} | {_cell(text)} |")
    return rows


def _said(response: dict[str, Any]) -> str:
    said = response.get("description", "")
    return "" if said == "Successful Response" else f" ({said[:1].lower()}{said[1:]})"


def _answer(response: dict[str, Any], spec: Any) -> str:
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return "no body"
    if not schema:
        return "JSON (its shape is not in the schema)"
    if schema.get("type") == "object" and schema.get("additionalProperties") is True:
        return "JSON object (its fields are not in the schema)"
    return _type(schema, spec)


def _shape(spec: Any, name: str) -> str:
    schema = spec["components"]["schemas"][name]
    rows = ["| field | type | description |", "| --- | --- | --- |"]
    for field, part in schema.get("properties", {}).items():
        rows.append(f"| `{field}` | {_type(part, spec)} | {_cell(part.get('description', ''))} |")
    return "\n".join(rows)


def _type(schema: dict[str, Any], spec: Any) -> str:
    """A schema's type in words; a response shape as a link to its block."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        target = spec["components"]["schemas"][name]
        return _type(target, spec) if "enum" in target else f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(part, spec) for part in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"array of {_type(items, spec)}" if items else "array"
    if kind == "object":
        values = schema.get("additionalProperties")
        return f"object of {_type(values, spec)}" if isinstance(values, dict) else "object"
    if kind == "string" and "format" in schema:
        return f"string ({schema['format']})"
    return str(kind) if kind else "any JSON"


def _constraints(schema: dict[str, Any], *, required: bool) -> str:
    parts = ["required"] if required else []
    for part in [schema, *schema.get("anyOf", [])]:
        parts += _range(part, "minLength", "maxLength", " characters")
        parts += _range(part, "minimum", "maximum", "")
        parts += _range(part, "minItems", "maxItems", " values")
        parts += _range(part, "minProperties", "maxProperties", " names")
        if "pattern" in part:
            parts.append(f"matches `{part['pattern']}`")
    if "default" in schema and schema["default"] is not None:
        parts.append(f"default `{_number(schema['default'])}`")
    return ", ".join(parts)


def _range(schema: dict[str, Any], low: str, high: str, unit: str) -> list[str]:
    least, most = schema.get(low), schema.get(high)
    if least is not None and most is not None:
        return [f"{_number(least)} to {_number(most)}{unit}"]
    if most is not None:
        return [f"at most {_number(most)}{unit}"]
    if least is not None and (least or not unit):  # "at least 0 characters" says nothing
        return [f"at least {_number(least)}{unit}"]
    return []


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" not in schema:
        return schema
    parts = [part for part in schema["anyOf"] if part.get("type") != "null"]
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**rest, **parts[0]} if len(parts) == 1 else {**rest, "anyOf": parts}


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _resolved(schema: dict[str, Any], spec: Any) -> dict[str, Any]:
    if "$ref" not in schema:
        return schema
    found: dict[str, Any] = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return found


def _referenced(spec: Any) -> set[str]:
    """The shapes (objects, not enums) the responses, and fields of bodies, refer to."""
    roots: list[Any] = []
    for operations in spec["paths"].values():
        for operation in operations.values():
            roots += operation["responses"].values()
            if "requestBody" in operation:
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                roots += _resolved(body, spec).get("properties", {}).values()
    names: set[str] = set()
    while roots:
        found = _refs(roots.pop())
        roots += [spec["components"]["schemas"][name] for name in found - names]
        names |= found
    return {name for name in names if "enum" not in spec["components"]["schemas"][name]}


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        ref = value.get("$ref")
        own = {ref.rsplit("/", 1)[-1]} if isinstance(ref, str) else set()
        return own.union(*(_refs(part) for part in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(part) for part in value))
    return set()


def _written(section: str) -> dict[str, str]:
    """The page's blocks: each `### heading` and its text, up to the next heading."""
    marks = list(_HEADING.finditer(section))
    found: dict[str, str] = {}
    for at, mark in enumerate(marks):
        end = marks[at + 1].start() if at + 1 < len(marks) else len(section)
        if mark[1] == "###":
            found[mark[2]] = section[mark.end() : end].strip("\n")
    return found


if __name__ == "__main__":
    sys.exit(main())
