"""Fixtures shared by every test folder: real stores (SQLite in tmp_path, the real
PostgreSQL server in a schema of its own per test) and a fake clock."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from durably.stores import Store, open_store
from durably.testing import FakeClock

POSTGRES_URL = os.environ.get("DURABLY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _postgres_reachable() -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


_POSTGRES_PROBLEM: str | bool | None = False  # False: not probed yet


def unavailable(problem: str, needed_by: str) -> NoReturn:
    """What a test needs is missing (`problem` says what): skip on a laptop; fail in CI, which
    must run `needed_by`."""
    if IN_CI:
        pytest.fail(f"{problem}; CI must run {needed_by}", pytrace=False)
    pytest.skip(problem)


def installed(package: str, *names: str, needed_by: str) -> str:
    """The path of the first of the programs `names` that is installed (Debian's `package`
    has them); else `unavailable`."""
    search = f"{os.environ.get('PATH', '')}:/usr/sbin"
    for name in names:
        if (found := shutil.which(name, path=search)) is not None:
            return found
    unavailable(f"Debian's {package} is not installed (apt-get install {package})", needed_by)


def require_postgres() -> None:
    """Skip on a laptop without PostgreSQL; fail in CI, where the server must be there."""
    global _POSTGRES_PROBLEM
    if _POSTGRES_PROBLEM is False:
        _POSTGRES_PROBLEM = _postgres_reachable()
    if _POSTGRES_PROBLEM:
        message = f"PostgreSQL is not reachable at {POSTGRES_URL} ({_POSTGRES_PROBLEM})"
        if IN_CI:
            pytest.fail(f"{message}; CI must run the PostgreSQL tests", pytrace=False)
        pytest.skip(f"{message}; set DURABLY_TEST_POSTGRES to run these tests")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL whose tables live in a fresh schema, dropped after the test."""
    require_postgres()
    import psycopg

    schema = f"durably_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    separator = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
        db.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'durably.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One test body, both real stores."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'durably.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# -- which halves ran -------------------------------------------------------------------------

_HALVES = {"postgres": "PostgreSQL", "browser": "browser"}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say whether the PostgreSQL and browser halves of the suite ran, or were skipped."""
    counts: dict[str, dict[str, int]] = {half: {} for half in _HALVES}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            keywords = getattr(report, "keywords", {})
            if getattr(report, "when", "call") not in ("call", "setup") or (
                outcome == "passed" and report.when != "call"
            ):
                continue
            for half in _HALVES:
                if half in keywords:
                    tally = counts[half]
                    tally[outcome] = tally.get(outcome, 0) + 1
    terminalreporter.section("halves of the suite")
    for half, label in _HALVES.items():
        tally = counts[half]
        if not tally:
            terminalreporter.write_line(f"{label}: no test of it in this run")
            continue
        ran = ", ".join(f"{count} {outcome}" for outcome, count in sorted(tally.items()))
        verdict = "RAN" if tally.get("passed") or tally.get("failed") else "DID NOT RUN"
        terminalreporter.write_line(f"{label}: {verdict} ({ran})")
