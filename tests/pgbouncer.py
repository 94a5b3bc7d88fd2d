"""A real PgBouncer in transaction pooling mode, in front of the test server.

Each test gets a pgbouncer process of its own (Debian's `pgbouncer` package), listening on a
free loopback port with `pool_mode = transaction` and a small pool, so that durably's client
connections really share server connections between transactions. The database it serves is
the test server's (`test`), reached as a login role made for the test whose schema of the
same name is first on its default search path (`"$user", public`): pgbouncer refuses the
`options=-csearch_path=...` startup parameter the other PostgreSQL tests use. PgBouncer
refuses to run as root, so as root it drops to `nobody` (`-u`).

Without the binary the tests skip, or fail in CI, which must run them (.ci/run installs it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, installed, require_postgres, unavailable

__all__ = ["Bouncer", "pgbouncer", "pgbouncer_binary"]

_OS_USER = "nobody"  # who pgbouncer runs as when the tests run as root
_READY_WITHIN = 15.0  # seconds for pgbouncer to take connections


def pgbouncer_binary() -> str:
    """The pgbouncer executable (skip, or fail in CI, without it)."""
    found = installed("pgbouncer", "pgbouncer", needed_by="the PgBouncer tests")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_OS_USER)
        except KeyError:
            problem = f"running as root, and there is no {_OS_USER!r} user to run pgbouncer as"
            unavailable(problem, "the PgBouncer tests")
    return found


class Bouncer:
    """One pgbouncer process and the role and schema its clients log in to."""

    def __init__(self, binary: str, *, pool_size: int) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        server = conninfo_to_dict(POSTGRES_URL)
        self.role = f"durably_pgb_{uuid.uuid4().hex[:10]}"
        self.database = str(server.get("dbname") or "test")
        self.port = _free_port()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
            db.execute(f"CREATE ROLE {self.role} LOGIN")  # type: ignore[arg-type]
            db.execute(f"CREATE SCHEMA {self.role} AUTHORIZATION {self.role}")  # type: ignore[arg-type]
            # its schema alone: tables another store left in public are none of its business
            db.execute(f"ALTER ROLE {self.role} SET search_path = {self.role}")  # type: ignore[arg-type]
        # Not pytest's tmp_path: it is 0700 root, which `nobody` cannot read.
        self.directory = Path(tempfile.mkdtemp(prefix="durably-pgbouncer-"))
        self.directory.chmod(0o755)
        self.log = self.directory / "pgbouncer.log"
        userlist = self.directory / "userlist.txt"
        userlist.write_text(f'"{self.role}" ""\n')
        host, port = server.get("host") or "127.0.0.1", server.get("port") or "5432"
        ini = self.directory / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"{self.database} = host={host} port={port} dbname={self.database}\n"
            "\n[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {userlist}\nadmin_users = {self.role}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\n"
            "max_client_conn = 500\nlogfile =\npidfile =\n"
        )
        for path in (userlist, ini):
            path.chmod(0o644)
        as_user = ["-u", _OS_USER] if os.geteuid() == 0 else []
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                [binary, *as_user, str(ini)], stdout=out, stderr=subprocess.STDOUT
            )
        self.url = f"postgresql://{self.role}@127.0.0.1:{self.port}/{self.database}"
        self.direct_url = f"postgresql://{self.role}@{host}:{port}/{self.database}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + _READY_WITHIN
        while True:
            if self._process.poll() is not None:
                self.close()
                pytest.fail(f"pgbouncer exited at start:\n{self.log.read_text()}")
            try:
                with psycopg.connect(self.url, connect_timeout=2) as db:
                    db.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.close()
                    pytest.fail(f"pgbouncer took no connection:\n{self.log.read_text()}")
                time.sleep(0.05)

    def connections(self) -> tuple[int, int]:
        """How many client connections pgbouncer holds for the database now, and how many
        server connections (its admin console's SHOW CLIENTS and SHOW SERVERS)."""
        import psycopg

        admin = f"postgresql://{self.role}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(admin, autocommit=True) as db:
            # The console speaks the simple query protocol only: libpq's PQexec, not psycopg's.
            counts = []
            for what in (b"SHOW CLIENTS", b"SHOW SERVERS"):
                result = db.pgconn.exec_(what)
                column = [result.fname(n) for n in range(result.nfields)].index(b"database")
                names = [result.get_value(row, column) for row in range(result.ntuples)]
                counts.append(sum(name == self.database.encode() for name in names))
        return counts[0], counts[1]

    def reconnect(self) -> None:
        """Have pgbouncer close its server connections (each once released), so that the next
        ones start afresh, with the role's settings of now (its admin console's RECONNECT)."""
        import psycopg

        admin = f"postgresql://{self.role}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(admin, autocommit=True) as db:
            db.pgconn.exec_(b"RECONNECT")  # the simple query protocol, as in connections()

    def close(self) -> None:
        import psycopg

        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (self.role,),
            )
            db.execute(f"DROP SCHEMA IF EXISTS {self.role} CASCADE")  # type: ignore[arg-type]
            db.execute(f"DROP ROLE IF EXISTS {self.role}")  # type: ignore[arg-type]
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def pgbouncer(request: pytest.FixtureRequest) -> Iterator[Bouncer]:
    """A pgbouncer of the test's own in transaction mode (a pool of 2 server connections,
    or `@pytest.mark.parametrize("pgbouncer", [n], indirect=True)`'s n); stopped after it."""
    require_postgres()
    binary = pgbouncer_binary()
    bouncer = Bouncer(binary, pool_size=getattr(request, "param", 2))
    try:
        yield bouncer
    finally:
        bouncer.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
