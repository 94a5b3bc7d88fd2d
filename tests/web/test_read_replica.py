"""`durably server --read-store URL`: a server that reads from a replica of its store
(docs/explanation/capacity.md, "Read replicas for the dashboard and API reads"), against a
real streaming standby of a primary of the test's own. GET requests, the dashboard's pages
and /metrics are read from the standby (shown by pausing its replay: what the primary has
since is not listed until it resumes); logins, actions and waits go to the primary, and are
seen on the standby once it has replayed them. A server whose --store is the standby itself
answers every action 503 store_unavailable, naming the primary."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

import durably
from durably.core.status import RunStatus
from durably.stores import Store, open_store
from durably.testing import FakeClock
from durably.web.auth import hash_token, new_token
from tests.integration.cli_app import make_app
from tests.integration.processes import REPO, wait_until
from tests.pg_cluster import ThrowawayPostgres
from tests.pg_cluster import replicated_postgres as replicated_postgres  # a fixture

from .conftest import Keys, free_port, serving
from .shop import Payments, make_shop

pytestmark = pytest.mark.postgres

_REPLAYED = 30.0  # seconds the standby may take to show the primary's last commit
_CLI_APP = "tests.integration.cli_app:app"


def replayed(primary: ThrowawayPostgres, standby: ThrowawayPostgres) -> None:
    """Return once the standby has replayed everything the primary has committed so far."""
    with psycopg.connect(primary.url, autocommit=True) as db:
        row = db.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    with psycopg.connect(standby.url, autocommit=True) as db:

        def caught_up() -> bool:
            behind = db.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn()) > 0", (row[0],)
            ).fetchone()
            return behind is not None and not behind[0]

        wait_until("the standby replaying the primary's WAL", caught_up, standby.log, _REPLAYED)


@contextlib.contextmanager
def replay_paused(standby: ThrowawayPostgres) -> Iterator[None]:
    """The standby's replay paused (it still receives the WAL: commits are not held up)."""
    with psycopg.connect(standby.url, autocommit=True) as db:
        db.execute("SELECT pg_wal_replay_pause()")
        try:
            yield
        finally:
            db.execute("SELECT pg_wal_replay_resume()")


@pytest.fixture
def stores(
    replicated_postgres: tuple[ThrowawayPostgres, ThrowawayPostgres],
) -> Iterator[tuple[durably.App, Store, ThrowawayPostgres, ThrowawayPostgres]]:
    """The shop on the primary, with a checkout completed and a delivery waiting for its
    signal (d-1); and the standby opened as a store, as `--read-store` opens it, after it
    replayed them."""
    primary, standby = replicated_postgres
    shop = make_shop(primary.url, Payments(), clock=FakeClock())
    shop.start("checkout", "o-1", 12, id="c-1")
    shop.start("deliver", "o-2", id="d-1")
    shop.run_until_idle()
    assert shop.client.get("d-1").status is RunStatus.PENDING
    replayed(primary, standby)
    replica = open_store(standby.url, create=False)
    try:
        yield shop, replica, primary, standby
    finally:
        replica.close()
        shop.close()


def test_reads_come_from_the_replica_and_actions_go_to_the_primary(
    stores: tuple[durably.App, Store, ThrowawayPostgres, ThrowawayPostgres], keys: Keys
) -> None:
    shop, replica, primary, standby = stores
    with (
        serving(shop, keys, reads=replica) as live,
        httpx.Client(base_url=live.url, timeout=30) as web,
    ):
        as_reader = live.headers(keys.read)
        with replay_paused(standby):
            shop.start("checkout", "o-3", 7, id="c-2")  # on the primary, not yet replayed
            listed = web.get("/api/runs", headers=as_reader)
            assert listed.status_code == 200, listed.text
            assert {run["id"] for run in listed.json()["runs"]} == {"c-1", "d-1"}
            assert web.get("/api/runs/c-2", headers=as_reader).status_code == 404
            assert 'durably_runs{status="pending"} 1.0' in web.get("/metrics").text  # d-1
        replayed(primary, standby)
        listed = web.get("/api/runs", headers=as_reader).json()["runs"]
        assert {run["id"] for run in listed} == {"c-1", "c-2", "d-1"}
        assert 'durably_runs{status="pending"} 2.0' in web.get("/metrics").text

        run = web.get("/api/runs/c-1", headers=as_reader).json()
        assert (run["status"], run["result"]) == ("completed", "ch-o-1")
        history = web.get("/api/runs/c-1/history", headers=as_reader).json()["events"]
        assert history[-1]["kind"] == "run_completed"

        # A login is recorded in the audit trail: on the primary, and read back from the
        # standby once replayed. The dashboard's pages read the standby.
        logged_in = web.post("/login", data={"token": keys.write, "next": "/runs"})
        assert logged_in.status_code in (200, 303), logged_in.text
        for page in ("/runs", "/runs/d-1", "/queues"):
            shown = web.get(page)
            assert shown.status_code == 200, (page, shown.text)
        assert [entry.action for entry in shop.client.audit().entries] == ["login"]

        # An action goes to the primary; the standby shows it once replayed.
        cancel = web.post("/api/runs/d-1/cancel", headers=live.headers(), json={})
        assert cancel.status_code == 200, cancel.text
        shop.run_until_idle()  # the run takes its cancel
        assert shop.client.get("d-1").status is RunStatus.CANCELLED
        replayed(primary, standby)
        assert web.get("/api/runs/d-1", headers=as_reader).json()["status"] == "cancelled"

        # A wait is served by the primary (a standby refuses LISTEN): it answers at once.
        waited = web.get("/api/runs/d-1/events/never?timeout=5s", headers=as_reader)
        assert waited.status_code == 409, waited.text  # ended without setting it


def test_a_server_whose_store_is_the_standby_refuses_actions_naming_the_primary(
    stores: tuple[durably.App, Store, ThrowawayPostgres, ThrowawayPostgres], keys: Keys
) -> None:
    shop, replica, _, _ = stores
    on_standby = make_shop(replica, Payments(), clock=FakeClock())  # not closed: the fixture's
    with (
        serving(on_standby, keys) as live,
        httpx.Client(base_url=live.url, timeout=30) as web,
    ):
        assert web.get("/api/runs/d-1", headers=live.headers()).json()["status"] == "pending"
        cancel = web.post("/api/runs/d-1/cancel", headers=live.headers(), json={})
        assert cancel.status_code == 503, cancel.text
        assert cancel.json()["error"] == "store_unavailable", cancel.text
        assert "takes no writes" in cancel.json()["message"]
        assert "primary" in cancel.json()["message"]
    assert shop.client.get("d-1").status is RunStatus.PENDING  # nothing changed


def test_durably_server_read_store_serves_the_standby_s_reads(
    replicated_postgres: tuple[ThrowawayPostgres, ThrowawayPostgres], tmp_path: Path
) -> None:
    """The command itself, as a process: --store on the primary, --read-store on the standby."""
    primary, standby = replicated_postgres
    app = make_app(primary.url)
    try:
        app.start("count", 3, id="n-1")
        app.run_until_idle()
    finally:
        app.close()
    replayed(primary, standby)
    token = new_token()
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"rita read {hash_token(token)}\n")
    port, log = free_port(), tmp_path / "server.log"
    command = [sys.executable, "-m", "durably", "server", _CLI_APP, "--store", primary.url]
    command += ["--read-store", standby.url, "--port", str(port), "--tokens-file", str(tokens)]
    with log.open("wb") as output:
        server = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as web:

            def ready() -> bool:
                assert server.poll() is None, f"the server exited:\n{log.read_text()}"
                with contextlib.suppress(httpx.TransportError):
                    return web.get("/api/ready").status_code == 200
                return False

            wait_until("the server answering /api/ready", ready, log, 60)
            with replay_paused(standby):
                app = make_app(primary.url)
                try:
                    app.start("count", 4, id="n-2")
                finally:
                    app.close()
                runs = web.get("/api/runs", headers={"Authorization": f"Bearer {token}"})
                assert runs.status_code == 200, runs.text
                assert [run["id"] for run in runs.json()["runs"]] == ["n-1"]
        said = log.read_text()
        assert f"reads from {standby.url}" in said, said
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
