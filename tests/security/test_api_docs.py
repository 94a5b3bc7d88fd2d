"""The API's docs page (/api/docs, Swagger UI) asks nothing of another site: its script, its
stylesheet and its start-up are files of durably's own, served from /static, so the page
carries the same content security policy as every other (no inline script, nothing from
another origin). Checked over HTTP on both stores, and in a real headless Chromium: the page
lists the API's operations with no violation of the policy and no request leaving the
server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.test_dashboard import chromium_path

from .conftest import Live

REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']*)["']""")


def test_the_docs_page_references_only_files_of_the_server(live: Live) -> None:
    with httpx.Client(base_url=live.url) as web:
        page = web.get("/api/docs")
        assert page.status_code == 200, page.text
        assert (
            page.headers["content-security-policy"]
            == (web.get("/login").headers["content-security-policy"])
        )
        assert "<script>" not in page.text  # every script is a file: none inline
        references = [r for r in REFERENCE.findall(page.text) if r != "data:,"]  # no favicon
        assert len(references) == 3, references  # the stylesheet, the bundle, the start-up
        for reference in references:
            assert reference.startswith("/static/"), reference
            assert web.get(reference).status_code == 200, reference
        assert web.get("/api/openapi.json").status_code == 200


@pytest.mark.browser
@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # the HTTP check has both
def test_the_docs_page_lists_the_operations_in_a_browser_within_its_policy(
    tmp_path: Path, live: Live
) -> None:
    executable = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    refused: list[str] = []
    elsewhere: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page()
        page.on("console", lambda message: _policed(message, refused))
        page.on("pageerror", lambda error: refused.append(f"page error: {error}"))
        page.on("request", lambda request: _left(request.url, live.url, elsewhere))
        page.goto(f"{live.url}/api/docs")
        page.wait_for_selector(".opblock", timeout=30_000)
        operations = page.locator(".opblock").count()
        browser.close()
    assert operations >= 25
    assert refused == []
    assert elsewhere == []


def _policed(message: Any, refused: list[str]) -> None:
    if message.type == "error" or "Content Security Policy" in message.text:
        refused.append(message.text)


def _left(url: str, server: str, elsewhere: list[str]) -> None:
    if not url.startswith((f"{server}/", "data:", "blob:")):
        elsewhere.append(url)
