"""docs/guarantees.md names, for each promise, the tests that check it: every file and test it
names must exist, so that the page cannot cite a test that was renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guarantees.md"
# `tests/x/y.py`, `tests/x/y.py::test_name`, or `tests/x/y.py` (`test_a`, `test_b`)
CITED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`(?: \(((?:`\w+`(?:, )?)+)\))?")


def cited() -> list[tuple[str, list[str]]]:
    found = []
    for path, single, many in CITED.findall(PAGE.read_text()):
        names = [single] if single else re.findall(r"`(\w+)`", many)
        found.append((path, names))
    return found


def test_every_test_the_guarantees_page_cites_exists() -> None:
    citations = cited()
    assert len(citations) >= 30  # the page's table, read
    for path, names in citations:
        source = ROOT / path
        assert source.is_file(), f"docs/guarantees.md cites {path}, which does not exist"
        text = source.read_text()
        for name in names:
            assert re.search(rf"^(?:async )?def {name}\(", text, re.M), (
                f"docs/guarantees.md cites {path}::{name}, which is not defined there"
            )
            assert name.startswith("test_"), name


def test_every_chaos_test_file_is_cited() -> None:
    """A new kind of fault gets its line on the page."""
    files = {path for path, _ in cited()}
    chaos = {f"tests/chaos/{p.name}" for p in (ROOT / "tests" / "chaos").glob("test_*.py")}
    assert chaos <= files, f"not on docs/guarantees.md: {sorted(chaos - files)}"
