"""The wheel, installed with the web extra in a fresh virtualenv, run far from the repository:
`durably --help`, `durably demo`, and `durably server` serving the dashboard, its static files
and the API on a SQLite file.

The sdist is built first and the wheel from it (what `python -m build` does for a release), so
a file either of them leaves out fails here. The extra's dependencies come from the package
index; the commands run in a directory outside the repository with no PYTHONPATH, so only the
installed package can answer."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
DEMO_APP = "durably.demo.workflows:app"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    workdir: Path  # outside the repository: the commands run here
    env: dict[str, str]  # no PYTHONPATH, no DURABLY_*, the venv's bin first on PATH

    def durably(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The installed `durably ARGS`, in the work directory."""
        return _run(
            [str(self.venv / "bin" / "durably"), *args],
            cwd=self.workdir,
            env=self.env,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The sdist and wheel built from this checkout, the wheel installed with `[web]`."""
    root = tmp_path_factory.mktemp("packaging")
    assert not root.is_relative_to(REPO)
    env = _clean_env()
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
        cwd=root,
        env=env,
        timeout=300,
    )
    [wheel] = dist.glob("durably-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root, env=env, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    _run([*pip, "--quiet", f"{wheel}[web]"], cwd=root, env=env, timeout=300)
    workdir = root / "elsewhere"
    workdir.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(wheel, venv, workdir, env)


def test_the_wheel_carries_the_dashboard_and_the_demo(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    shipped = {
        f"durably/web/{path.relative_to(REPO / 'durably' / 'web')}"
        for folder in ("templates", "static")
        for path in (REPO / "durably" / "web" / folder).iterdir()
    }
    assert "durably/web/templates/base.html" in shipped
    assert shipped <= names
    assert {"durably/demo/scenario.py", "durably/demo/workflows.py"} <= names
    assert {name.split("/")[0] for name in names} == {"durably", _dist_info(installed.wheel)}


def test_the_base_install_leaves_the_web_to_its_extra(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        metadata = wheel.read(f"{_dist_info(installed.wheel)}/METADATA")
    requires = [line for line in metadata.decode().splitlines() if line.startswith("Requires-Dist")]
    base = [line for line in requires if "extra ==" not in line]
    assert base, requires
    assert not [line for line in base if re.search(r"fastapi|uvicorn|jinja2|psycopg", line)]


def test_the_installed_command_is_the_installed_package(installed: Installed) -> None:
    where = _run(
        [str(installed.venv / "bin" / "python"), "-c", "import durably; print(durably.__file__)"],
        cwd=installed.workdir,
        env=installed.env,
    )
    package = Path(where.stdout.strip())
    assert package.is_relative_to(installed.venv), package
    helped = installed.durably("--help")
    assert "Usage: durably" in helped.stdout
    assert {"demo", "server", "worker", "runs"} <= set(re.findall(r"^  (\w+)", helped.stdout, re.M))


def test_the_demo_runs_from_the_installed_package(installed: Installed) -> None:
    ran = installed.durably("demo", timeout=300)
    report = dict(re.findall(r"^  (\S.*?)\s{2,}(\S+)$", ran.stdout, re.M))
    assert report["orders"] == "200", ran.stdout
    assert report["worker killed with SIGKILL mid-run"] == "yes"
    assert report["duplicate charges"] == "0"
    ended = (
        "completed",
        "compensated (out of stock: charge refunded, run failed)",
        "dead-lettered (waiting for a person)",
    )
    assert sum(int(report[label]) for label in ended) == 200, ran.stdout
    assert (installed.workdir / "demo" / "durably.db").exists()


def test_the_server_serves_the_dashboard_and_the_api(installed: Installed) -> None:
    store = f"sqlite:///{installed.workdir / 'server.db'}"
    made = installed.durably("token", "new", "erin").stdout
    token = re.search(r"not shown again\): (\S+)", made)
    line = re.search(r"line for the server's tokens: (.+)", made)
    assert token is not None, made
    assert line is not None, made
    tokens = installed.workdir / "tokens.txt"
    tokens.write_text(line.group(1) + "\n")
    order = [{"id": "A-17", "total": 4200, "email": "a@example.com"}]
    installed.durably(
        "start",
        "fulfil",
        "--app",
        DEMO_APP,
        "--store",
        store,
        "--input",
        json.dumps(order),
        "--id",
        "order-A-17",
    )
    with _server(installed, store, tokens) as web:
        login = web.get("/login")
        assert login.status_code == 200
        assert '<link rel="stylesheet" href="/static/durably.css">' in login.text
        assert 'name="token"' in login.text

        css = web.get("/static/durably.css")
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")
        assert css.content == (REPO / "durably" / "web" / "static" / "durably.css").read_bytes()

        docs = web.get("/api/docs")  # Swagger UI from the package, not from a CDN
        assert docs.status_code == 200
        assert '<script src="/static/swagger-ui-bundle.js">' in docs.text
        assert web.get("/static/swagger-ui-bundle.js").status_code == 200

        assert web.get("/api/runs/order-A-17").status_code == 401
        headers = {"Authorization": f"Bearer {token.group(1)}"}
        api = web.get("/api/runs/order-A-17", headers=headers)
        assert api.status_code == 200, api.text
        assert (api.json()["id"], api.json()["status"]) == ("order-A-17", "pending")

        logged_in = web.post("/login", data={"token": token.group(1), "next": "/runs/order-A-17"})
        assert (logged_in.status_code, logged_in.headers["location"]) == (303, "/runs/order-A-17")
        page = web.get("/runs/order-A-17")
        assert page.status_code == 200
        assert '<link rel="stylesheet" href="/static/durably.css">' in page.text
        assert "order-A-17" in page.text
        assert "fulfil" in page.text


# -- helpers ----------------------------------------------------------------------------------


def _run(
    command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `command`; fail with its output unless it succeeds."""
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done


def _clean_env() -> dict[str, str]:
    """This process's environment without what would point a command at the repository."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {
        key: value
        for key, value in os.environ.items()
        if key not in dropped and not key.startswith("DURABLY_")
    }


def _dist_info(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name}-{version}.dist-info"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def _server(installed: Installed, store: str, tokens: Path) -> Iterator[httpx.Client]:
    """The installed `durably server` for the demo app on a free loopback port, and a client
    of it once it answers; stopped with SIGTERM when the block ends, as an operator would."""
    port = _free_port()
    log = installed.workdir / "server.log"
    command = [
        str(installed.venv / "bin" / "durably"),
        "server",
        DEMO_APP,
        "--store",
        store,
        "--port",
        str(port),
        "--tokens-file",
        str(tokens),
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=installed.workdir,
            env=installed.env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as client:
            _wait_until_up(client, process, log)
            yield client
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    # uvicorn shuts down, then raises the signal it caught again: the status says SIGTERM
    assert process.returncode in (0, -signal.SIGTERM), log.read_text()
    assert "Application shutdown complete" in log.read_text()


def _wait_until_up(client: httpx.Client, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.TransportError):
            if client.get("/api/health").status_code == 200:
                return
        assert process.poll() is None, f"the server exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"the server did not answer:\n{log.read_text()}"
        time.sleep(0.05)
