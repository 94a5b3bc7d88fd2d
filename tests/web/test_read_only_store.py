"""A PostgreSQL store that takes no writes (a standby before a failover promotes it, or a
database set read-only) is a store that is down for writing: every writer gets one clear
error that names it and what to do, and nothing changes. The CLI prints it on one line with
no traceback, and the HTTP API answers 503 store_unavailable; the same call succeeds once the
URL leads to a writable database. (A worker's commits wait with backoff on a StoreUnavailable,
as for any store that is down.)"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import durably
from durably.core.status import RunStatus
from durably.errors import RunNotFound, StoreUnavailable
from durably.testing import FakeClock
from tests.console import run_durably

from .conftest import Keys, serving
from .shop import Payments, make_shop

pytestmark = pytest.mark.postgres

_SAID = "takes no writes"


@pytest.fixture
def writable(postgres_url: str) -> Iterator[durably.App]:
    """The shop on its store, with a delivery waiting for its signal (run d-1)."""
    app = make_shop(postgres_url, Payments(), clock=FakeClock())
    app.start("deliver", "o-1", id="d-1")
    app.run_until_idle()
    assert app.client.get("d-1").status is RunStatus.PENDING
    yield app
    app.close()


@pytest.fixture
def read_only(postgres_url: str, writable: durably.App) -> str:
    """The same database through sessions whose transactions are read-only, as on a standby."""
    return postgres_url + "%20-cdefault_transaction_read_only%3Don"


def test_a_write_is_refused_by_name_and_changes_nothing(
    read_only: str, writable: durably.App
) -> None:
    app = make_shop(read_only, Payments(), clock=FakeClock())
    try:
        assert app.client.get("d-1").status is RunStatus.PENDING  # reads still work
        before = writable.client.history("d-1")
        with pytest.raises(StoreUnavailable, match=_SAID) as refused:
            app.client.cancel("d-1", reason="no address")
        assert "primary" in str(refused.value)
        with pytest.raises(StoreUnavailable, match=_SAID):
            app.start("deliver", "o-2", id="d-2")
        assert writable.client.history("d-1") == before
        assert writable.client.get("d-1").status is RunStatus.PENDING
        with pytest.raises(RunNotFound):
            writable.client.get("d-2")
    finally:
        app.close()
    writable.client.cancel("d-1", reason="no address")  # the same call, on the primary
    writable.run_until_idle()
    assert writable.client.get("d-1").status is RunStatus.CANCELLED


def test_the_cli_says_it_in_one_line(read_only: str) -> None:
    status, said = run_durably("cancel", "d-1", "--store", read_only)
    assert status == 1
    assert said.startswith("error: "), said
    assert _SAID in said, said
    assert "Traceback" not in said


def test_the_api_answers_503_store_unavailable(read_only: str, keys: Keys) -> None:
    app = make_shop(read_only, Payments(), clock=FakeClock())
    try:
        with serving(app, keys) as live, httpx.Client(base_url=live.url) as web:
            answer = web.post("/api/runs/d-1/cancel", headers=live.headers(), json={})
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "store_unavailable", answer.text
            assert _SAID in answer.json()["message"]
            assert web.get("/api/runs/d-1", headers=live.headers()).status_code == 200
    finally:
        app.close()
