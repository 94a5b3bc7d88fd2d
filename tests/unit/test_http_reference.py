"""docs/reference/http-api.md carries every route of the HTTP API, as the schema the server
publishes describes it, and the check that says when it does not."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from durably.app import App
from durably.web.access import Reader, Writer
from durably.web.auth import Tokens
from durably.web.server import create_app
from tools.docs.http_api import (
    BEGIN,
    END,
    PAGE,
    blocks,
    main,
    problems,
    published,
    rewrite,
)

PAGE_TEXT = PAGE.read_text(encoding="utf-8")


def test_every_route_has_its_block_in_the_reference() -> None:
    found = problems(PAGE_TEXT)
    assert not found, (
        "docs/reference/http-api.md does not describe every route as the server's schema "
        "does; run `make docs`:\n" + "\n".join(found)
    )


def test_the_reference_is_made_from_the_schema_the_server_serves(tmp_path: Path) -> None:
    served = create_app(App(f"sqlite:///{tmp_path / 'durably.db'}"), tokens=Tokens([]))
    schema = asyncio.run(_get(served, "/api/openapi.json"))
    assert schema == published().openapi()
    assert (schema["info"]["title"], schema["info"]["version"]) == ("durably", "1")
    assert "(title `durably`, version `1`, OpenAPI 3.1.0)" in PAGE_TEXT
    assert not (tmp_path / "durably.db").exists()  # building the schema opened no store


def test_who_may_call_a_route_comes_from_its_dependencies_not_its_method() -> None:
    said = {block.heading: block.text for block in blocks()}
    assert "Auth: none." in said["GET /api/health"]
    assert "Auth: none." in said["GET /api/ready"]
    assert "Auth: a token of either role" in said["GET /api/runs"]
    assert "Auth: a token with the write role" in said["POST /api/runs/{run_id}/retry"]
    assert said["GET /api/ready"].endswith("Errors ([what each means](#errors)): `503`.")
    assert "Errors" not in said["GET /api/health"]

    web = published()

    def purge(who: Writer) -> dict[str, str]:
        """Forget everything (a GET that acts: its token must be a writer's)."""
        return {"by": who.name}

    def peek(who: Reader, depth: int = 1) -> dict[str, int]:
        return {"depth": depth}

    web.add_api_route("/api/zz-purge", purge, methods=["GET"], tags=["zz"])
    web.add_api_route("/api/zz-peek", peek, methods=["POST"], tags=["zz"])
    grown = {block.heading: block.text for block in blocks(web)}
    assert "Auth: a token with the write role" in grown["GET /api/zz-purge"]
    assert "Auth: a token of either role" in grown["POST /api/zz-peek"]
    assert "| `depth` | integer | default `1` |  |" in grown["POST /api/zz-peek"]


def test_the_check_names_a_route_the_page_lacks() -> None:
    web = published()

    def undocumented() -> dict[str, str]:
        """A route nobody documented."""
        return {}

    web.add_api_route("/api/zzz", undocumented, methods=["GET"], tags=["runs"])
    assert problems(PAGE_TEXT, web) == ["GET /api/zzz: no block"]
    assert problems(rewrite(PAGE_TEXT, web), web) == []


def test_the_check_names_a_deleted_block_a_stale_one_and_one_too_many() -> None:
    by_heading = {block.heading: block for block in blocks()}
    retry = by_heading["POST /api/runs/{run_id}/retry"]
    start = by_heading["POST /api/runs"]
    page = (
        PAGE_TEXT.replace(retry.markdown(), "")
        .replace(start.text, start.text.replace("1 to 200", "1 to 100"))
        .replace(END, "### DELETE /api/runs\n\nGone.\n\n" + END)
    )
    assert problems(page) == [
        "POST /api/runs: its block is stale",
        "POST /api/runs/{run_id}/retry: no block",
        "DELETE /api/runs: a block, but no such route or shape",
    ]
    assert problems(rewrite(page)) == []


def test_the_check_names_a_stale_response_shape() -> None:
    [run] = [block for block in blocks() if block.heading == "RunOut"]
    page = PAGE_TEXT.replace(run.text, run.text.replace("| `priority` | integer |  |\n", ""))
    assert problems(page) == ["RunOut: its block is stale"]


def test_check_exits_1_until_the_page_is_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "http-api.md"
    [health] = [block for block in blocks() if block.heading == "GET /api/health"]
    page.write_text(PAGE_TEXT.replace(health.markdown(), ""), encoding="utf-8")
    assert main([str(page), "--check"]) == 1
    err = capsys.readouterr().err
    assert "GET /api/health: no block" in err
    assert "run `make docs`" in err
    assert main([str(page)]) == 0
    assert main([str(page), "--check"]) == 0
    assert page.read_text(encoding="utf-8") == PAGE_TEXT


def test_a_rewrite_changes_only_the_generated_section() -> None:
    before, _, rest = PAGE_TEXT.partition(BEGIN)
    _, _, after = rest.partition(END)
    assert rewrite(f"{before}{BEGIN}{END}{after}") == PAGE_TEXT
    assert "## Tokens and roles" in before


async def _get(web: Any, path: str) -> Any:
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url="http://durably") as client:
        response = await client.get(path)
        assert response.status_code == 200
        return response.json()
