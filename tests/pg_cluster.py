"""A throwaway PostgreSQL cluster a test starts, restarts and removes itself.

Restarting a server is the point of the tests that use it, so they never touch the shared
server other tests use. The cluster lives in a temporary directory, listens on a free
loopback port only, and trusts local connections. initdb refuses to run as root, so as root
the binaries run as the `postgres` OS user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import unavailable

__all__ = [
    "ThrowawayPostgres",
    "replicated_postgres",
    "throwaway_binaries",
    "throwaway_postgres",
]

_OS_USER = "postgres"
_READY_WITHIN = 30.0  # seconds for a (re)started server to accept connections


class ThrowawayPostgres:
    """One cluster: `start()`, `restart(mode=...)`, `stop()`, `url`; `remove()` at the end."""

    def __init__(self, binaries: Path, *, settings: str = "", initdb: bool = True) -> None:
        self._binaries = binaries
        self._settings = settings  # more server options (-c name=value ...)
        self._as_postgres = os.geteuid() == 0
        # Not pytest's tmp_path: it is 0700 root, which the postgres user cannot enter.
        self.directory = Path(tempfile.mkdtemp(prefix="durably-pg-"))
        self._data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.port = _free_port()
        if self._as_postgres:
            shutil.chown(self.directory, user=_OS_USER, group=_OS_USER)
        if initdb:
            self._initdb()

    @classmethod
    def standby_of(cls, primary: ThrowawayPostgres, name: str) -> ThrowawayPostgres:
        """A streaming replica of `primary` (pg_basebackup), named `name` for the primary's
        synchronous_standby_names; start() starts it as a standby."""
        standby = cls(primary._binaries, initdb=False)
        source = ("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres")
        target = ("-D", str(standby._data), "-X", "stream", "--no-sync")
        standby._run(standby._tool("pg_basebackup"), *source, *target)
        (standby._data / "standby.signal").touch()
        conninfo = f"host=127.0.0.1 port={primary.port} user=postgres application_name={name}"
        standby._settings = f"-c primary_conninfo='{conninfo}'"
        return standby

    def trust(self, network: str, address: str) -> None:
        """Listen on `address` too, and trust connections from `network` (before start())."""
        with (self._data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {network} trust\n")
        self._settings += f" -c listen_addresses=127.0.0.1,{address}"

    def promote(self) -> None:
        """Make this standby the primary, and wait until it takes writes."""
        self._pg_ctl("promote")
        import psycopg

        deadline = time.monotonic() + _READY_WITHIN
        while True:
            with psycopg.connect(self.url, connect_timeout=2) as db:
                row = db.execute("SELECT pg_is_in_recovery()").fetchone()
            if row is not None and not row[0]:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError("the promoted standby is still in recovery")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._pg_ctl("start", "-l", str(self.log), "-o", self._server_options())
        self.wait_until_ready()

    def restart(self, mode: str = "immediate") -> None:
        """Stop the server (`immediate`: as if it crashed), start it, wait until it answers."""
        self._pg_ctl("restart", "-m", mode, "-l", str(self.log), "-o", self._server_options())
        self.wait_until_ready()

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-m", mode)

    def running(self) -> bool:
        status = self._run(self._tool("pg_ctl"), "status", "-D", str(self._data), check=False)
        return status.returncode == 0

    def wait_until_ready(self) -> None:
        """Return once a fresh connection works (pg_ctl's own wait may return earlier)."""
        import psycopg

        deadline = time.monotonic() + _READY_WITHIN
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def remove(self) -> None:
        """Stop the server if it runs, and delete the cluster."""
        if self._data.exists() and self.running():
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    def _initdb(self) -> None:
        self._run(
            self._tool("initdb"),
            "-D",
            str(self._data),
            "--auth=trust",
            "-U",
            "postgres",
            "--encoding=UTF8",
            "--no-sync",  # a throwaway: nothing here needs to survive a power cut
        )

    def _server_options(self) -> str:
        # fsync off: a restart kills the processes, not the machine, so the WAL they wrote
        # survives in the page cache, and the tests on two cores stay fast.
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.directory} -c fsync=off {self._settings}"
        ).strip()

    def _pg_ctl(self, action: str, *options: str) -> None:
        self._run(self._tool("pg_ctl"), action, "-D", str(self._data), "-w", *options)

    def _tool(self, name: str) -> str:
        return str(self._binaries / name)

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", _OS_USER, "--"] if self._as_postgres else []
        done = subprocess.run(
            [*prefix, *command],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}"
            )
        return done


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _binaries() -> Path | None:
    """The directory of initdb, pg_ctl and postgres, if this machine has them."""
    found = shutil.which("initdb")
    candidates = [str(Path(found).resolve().parent)] if found else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for candidate in candidates:
        folder = Path(candidate)
        if all((folder / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _missing() -> str | None:
    """Why no throwaway cluster can be made here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'durably[postgres]')"
    if _binaries() is None:
        return "the PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed"
    if os.geteuid() == 0:  # initdb refuses to run as root
        if shutil.which("runuser") is None:
            return "running as root without runuser to run initdb as another user"
        try:
            pwd.getpwnam(_OS_USER)
        except KeyError:
            return f"running as root, and there is no {_OS_USER!r} user to run initdb as"
    return None


def throwaway_binaries() -> Path:
    """The server binaries a throwaway cluster runs (skip, or fail in CI, without them)."""
    return _binaries_or_skip()


def _binaries_or_skip() -> Path:
    problem = _missing()
    if problem:
        unavailable(f"no throwaway PostgreSQL cluster: {problem}", "the PostgreSQL restart tests")
    binaries = _binaries()
    assert binaries is not None
    return binaries


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A started cluster of the test's own; always stopped and removed afterwards."""
    cluster = ThrowawayPostgres(_binaries_or_skip())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


STANDBY = "standby1"


@pytest.fixture
def replicated_postgres() -> Iterator[tuple[ThrowawayPostgres, ThrowawayPostgres]]:
    """A primary and its synchronous streaming standby, both of the test's own: a commit is
    acknowledged once the standby has it (synchronous_commit=on)."""
    primary = ThrowawayPostgres(
        _binaries_or_skip(),
        settings=f"-c wal_level=replica -c max_wal_senders=4 -c synchronous_commit=on"
        f" -c synchronous_standby_names={STANDBY}",
    )
    standby: ThrowawayPostgres | None = None
    try:
        primary.start()
        standby = ThrowawayPostgres.standby_of(primary, STANDBY)
        standby.start()
        _wait_for_sync(primary)
        yield primary, standby
    finally:
        primary.remove()
        if standby is not None:
            standby.remove()


def _wait_for_sync(primary: ThrowawayPostgres) -> None:
    import psycopg

    deadline = time.monotonic() + _READY_WITHIN
    while time.monotonic() < deadline:
        with psycopg.connect(primary.url) as db:
            row = db.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY,),
            ).fetchone()
        if row is not None and row[0] == "sync":
            return
        time.sleep(0.05)
    raise RuntimeError(f"the standby never became synchronous:\n{primary.log.read_text()}")
