"""Least privilege on PostgreSQL, as docs/how-to/least-privilege.md sets it up (its SQL applied
word for word): `durably migrate` as the database's owner; a real worker, the real server and
the CLI as a role that may only read and write rows; and that role's clear error, not a
traceback, for a schema it would have to change."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from durably.stores.sql.schema import LATEST_VERSION
from durably.web.auth import hash_token, new_token
from tests.conftest import POSTGRES_URL, require_postgres
from tests.contract.support import execute_sql, older_schema

from .cli_app import make_app
from .processes import REPO, start_worker, wait_until
from .test_cli import APP, durably_cli, refused

httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.postgres

_HOW_TO = REPO / "docs" / "how-to" / "least-privilege.md"
_NEVER = {"DURABLY_MIGRATE": "never"}


@dataclass(frozen=True)
class Roles:
    owner_url: str  # the database's owner: migrates
    app_url: str  # rows only: the workers, the server, the CLI


@pytest.fixture
def roles() -> Iterator[Roles]:
    """A fresh database owned by a fresh owner role, and a fresh app role, made by the how-to's
    first block of SQL as the superuser (names unique to this test); all dropped after it."""
    require_postgres()
    import psycopg

    suffix = uuid.uuid4().hex[:10]
    names = {"owner": f"durably_owner_{suffix}", "app": f"durably_app_{suffix}"}
    database = f"durably_lp_{suffix}"
    as_superuser, _ = _sql_blocks(names, database)
    try:
        _run(POSTGRES_URL, as_superuser)
        yield Roles(_url(names["owner"], database), _url(names["app"], database))
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")  # type: ignore[arg-type]
            for role in names.values():
                db.execute(f"DROP ROLE IF EXISTS {role}")  # type: ignore[arg-type]


def test_a_worker_the_server_and_the_cli_run_as_a_role_that_may_only_read_and_write_rows(
    roles: Roles, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    # Before any migration, the app's role cannot make the tables: it says so, and what to run.
    start = ("start", "count", "--app", APP, "--store", roles.app_url, "--input", "[1]")
    refused(durably_cli(*start, cwd=tmp_path), 1, "this role may not change the schema")

    # An older schema, granted as the how-to says, then migrated by the owner: the tables
    # that migration makes are the app role's to use too (the default privileges).
    older_schema(roles.owner_url, 5)
    names = {"owner": _user(roles.owner_url), "app": _user(roles.app_url)}
    _, as_owner = _sql_blocks(names, urlsplit(roles.owner_url).path.lstrip("/"))
    _run(roles.owner_url, as_owner)
    migrated = durably_cli("migrate", "--store", roles.owner_url, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    assert f"from version 5 to {LATEST_VERSION}" in migrated.stdout

    # The CLI as the app's role, with $DURABLY_MIGRATE=never, as the how-to runs it.
    started = durably_cli(*start, "--id", "by-cli", cwd=tmp_path, env=_NEVER)
    assert started.returncode == 0, started.stderr
    check = durably_cli("migrate", "--check", "--store", roles.app_url, cwd=tmp_path, env=_NEVER)
    assert check.returncode == 0, check.stderr

    # A real worker as the app's role (migrating left to its default: a current schema is
    # opened without DDL), which beats in durably_workers, a table the migration made.
    worker = start_worker(roles.app_url, tmp_path / "worker.log", target=APP)
    processes.append(worker)
    app = make_app(roles.app_url)
    try:
        assert app.handle("by-cli").result(timeout=60) == 2  # woken by LISTEN/NOTIFY
        token = new_token()
        tokens = tmp_path / "tokens"
        tokens.write_text(f"erin write {hash_token(token)}\n")
        with _server(roles.app_url, tokens, tmp_path / "server.log") as web:
            bearer = {"Authorization": f"Bearer {token}"}
            made = web.post(
                "/api/runs",
                json={"workflow": "count", "input": [41], "id": "by-api"},
                headers=bearer,
            )
            assert made.status_code == 201, made.text
            assert app.handle("by-api").result(timeout=60) == 42
            listed = web.get("/api/runs", headers=bearer)
            assert {run["id"] for run in listed.json()["runs"]} == {"by-cli", "by-api"}
            assert web.get("/api/workers", headers=bearer).json()  # the worker's beat
    finally:
        app.close()
    shown = durably_cli("runs", "show", "by-api", "--store", roles.app_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "completed" in shown.stdout


def test_the_app_role_is_told_to_run_durably_migrate_when_the_schema_is_behind(
    roles: Roles, tmp_path: Path
) -> None:
    older_schema(roles.owner_url, 6)
    names = {"owner": _user(roles.owner_url), "app": _user(roles.app_url)}
    _, as_owner = _sql_blocks(names, urlsplit(roles.owner_url).path.lstrip("/"))
    _run(roles.owner_url, as_owner)
    behind = f"is at version 6, but this durably needs version {LATEST_VERSION}"

    # Allowed to migrate, the worker tries, and PostgreSQL's refusal is said plainly.
    worker = subprocess.run(
        [sys.executable, "-m", "durably", "worker", APP, "--store", roles.app_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert worker.returncode == 1, worker.stderr
    assert behind in worker.stderr
    assert "this role may not change the schema (must be owner of table" in worker.stderr
    assert "as the database's owner" in worker.stderr
    assert "Traceback" not in worker.stderr
    # Told never to, the CLI only reads the version.
    listed = durably_cli("runs", "list", "--store", roles.app_url, cwd=tmp_path, env=_NEVER)
    refused(listed, 1, behind)
    assert execute_sql(roles.owner_url, "SELECT value FROM durably_meta") == [("6",)]


def test_the_how_to_grants_exactly_rows_and_sequences() -> None:
    """The how-to's second block gives the app's role no right to change the schema."""
    _, as_owner = _sql_blocks({"owner": "o", "app": "a"}, "d")
    granted = " ".join(line for line in as_owner if " TO a" in line)
    assert re.findall(r"GRANT ([A-Z, ]+) ON", granted) == [
        "CONNECT",
        "USAGE",
        "SELECT, INSERT, UPDATE, DELETE",
        "USAGE, SELECT",
        "SELECT, INSERT, UPDATE, DELETE",
        "USAGE, SELECT",
    ]


# -- helpers -------------------------------------------------------------------------------------


def _sql_blocks(names: dict[str, str], database: str) -> tuple[list[str], list[str]]:
    """The how-to's two SQL blocks (as the superuser; as the owner), statement by statement,
    with its role and database names replaced by these."""
    text = _HOW_TO.read_text()
    text = re.sub(r"\bdurably_owner\b", names["owner"], text)
    text = re.sub(r"\bdurably_app\b", names["app"], text)
    text = re.sub(r"DATABASE durably\b", f"DATABASE {database}", text)
    blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
    assert len(blocks) == 2, f"{_HOW_TO} should hold two SQL blocks"
    first, second = ([s.strip() for s in block.split(";") if s.strip()] for block in blocks)
    return first, second


def _run(url: str, statements: list[str]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:  # CREATE DATABASE: no transaction
        for statement in statements:
            db.execute(statement)  # type: ignore[call-overload]


def _url(user: str, database: str) -> str:
    parts = urlsplit(POSTGRES_URL)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}", path=f"/{database}"))


def _user(url: str) -> str:
    user = urlsplit(url).username
    assert user is not None
    return user


@contextlib.contextmanager
def _server(store_url: str, tokens: Path, log: Path) -> Iterator[httpx.Client]:
    """`durably server` for the CLI's test app, as the role of `store_url`, on a free port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "durably", "server", APP, "--store", store_url]
    command += ["--port", str(port), "--tokens-file", str(tokens)]
    with log.open("wb") as output:
        server = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as web:
            _wait_until_ready(web, server, log)
            yield web
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def _wait_until_ready(
    web: httpx.Client, server: subprocess.Popen[bytes], log: Path, timeout: float = 60
) -> None:
    """Ask until the server answers /api/ready (it has opened the store as the app's role)."""

    def ready() -> bool:
        assert server.poll() is None, f"the server exited:\n{log.read_text()}"
        with contextlib.suppress(httpx.TransportError):
            return web.get("/api/ready").status_code == 200
        return False

    wait_until("the server answering /api/ready", ready, log, timeout)
