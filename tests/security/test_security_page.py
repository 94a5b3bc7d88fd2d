"""docs/explanation/security.md says what is protected, each with the test that checks it:
every test file it names must exist, and every file of tests/security must be named there, so
that the page can neither cite a check that is gone nor leave one out."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explanation" / "security.md"
CITED = re.compile(r"`(tests/[\w/]+\.py)`")
NOT_CHECKS = {"__init__.py", "conftest.py", "test_security_page.py"}


def test_every_test_the_security_page_cites_exists() -> None:
    cited = set(CITED.findall(PAGE.read_text()))
    assert len(cited) >= 10
    for path in sorted(cited):
        assert (ROOT / path).is_file(), f"{PAGE.name} cites {path}, which does not exist"


def test_every_security_test_is_cited_on_the_page() -> None:
    cited = set(CITED.findall(PAGE.read_text()))
    here = Path(__file__).parent
    for test in sorted(here.glob("*.py")):
        if test.name not in NOT_CHECKS:
            assert f"tests/security/{test.name}" in cited, f"{PAGE.name} does not cite {test.name}"
