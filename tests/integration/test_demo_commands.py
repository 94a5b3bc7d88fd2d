"""`durably demo`'s closing commands work pasted in a new shell (issue #24): they name the
`durably` that ran the demo by its path, as a new shell in the repository does not have
.venv/bin on its PATH. The demo runs for real (20 orders, two worker processes, one killed),
on both stores; its printed `dlq show` and `dlq retry` then run in `sh` with a bare PATH."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from durably.demo.scenario import hints
from durably.views.commands import durably_command

REPO = Path(__file__).resolve().parents[2]
BARE_PATH = "/usr/bin:/bin"  # a new shell's, without the virtualenv


def test_the_printed_durably_is_the_script_beside_the_running_python() -> None:
    script = Path(sys.executable).parent / "durably"
    assert script.is_file(), "the tests run from a virtualenv with durably installed"
    assert shlex.split(durably_command()) == [str(script)]
    printed = hints("order-00011", "sqlite:////tmp/a b/durably.db", "/tmp/a b/services.db")
    commands = [line.split(":  ")[-1].strip() for line in printed.splitlines() if "--store" in line]
    assert len(commands) == 4  # dlq show, dlq retry, a worker, the dashboard
    for command in commands:
        words = shlex.split(command)
        if words[0].startswith("DEMO_SERVICES="):  # the worker's line sets its variable first
            words = words[1:]
        assert words[0] == str(script), command
        assert words[words.index("--store") + 1] == "sqlite:////tmp/a b/durably.db", command


@pytest.mark.chaos  # the demo kills one of its worker processes with SIGKILL
def test_the_demo_s_commands_run_pasted_in_a_new_shell(tmp_path: Path, store_url: str) -> None:
    if store_url.startswith("sqlite:///"):  # the demo's own default place
        store_url = f"sqlite:///{tmp_path / 'demo' / 'durably.db'}"
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DURABLY_", "DEMO_"))}
    ran = subprocess.run(
        [sys.executable, "-m", "durably", "demo", "--orders", "20", "--store", store_url],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # order 11's mail is rejected every time (the fake mailer's faults hang on the order's id)
    assert re.search(r"^  dead-lettered \(waiting for a person\)\s+1$", ran.stdout, re.M)
    show = re.search(r"^Inspect a dead letter:\s+(.+)$", ran.stdout, re.M)
    retry = re.search(r"^Retry it:\s+(.+)$", ran.stdout, re.M)
    assert show, ran.stdout
    assert retry, ran.stdout

    new_shell = {"PATH": BARE_PATH, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    shown = paste(show.group(1), new_shell)
    assert "order-00011" in shown.stdout
    assert "mailer: 503 for order 00011" in shown.stdout
    retried = paste(retry.group(1), new_shell)
    assert "run order-00011 is pending again" in retried.stdout


def paste(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` as a person pastes it into a new shell in the repository."""
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{command}\nexited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done
