"""`durably webhooks ...`, `durably listen` and `durably changes` as a person types them, on
both stores: the secret (given in an environment variable) is never printed, bad input is
refused on one line naming what is wrong, and `listen` prints the status changes another
process commits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import durably
from durably.testing import FakeClock

from .test_cli import REPO, durably_cli, refused


def test_webhooks_are_added_listed_and_removed(store_url: str, tmp_path: Path) -> None:
    durably.App(store_url).store.close()  # the store exists
    added = durably_cli(
        *("webhooks", "add", "https://hooks.example.com/x", "--store", store_url),
        *("--events", "run_failed,run_completed", "--secret-env", "HOOK_SECRET", "--json"),
        cwd=tmp_path,
        env={"HOOK_SECRET": "whsec_from_env"},
    )
    assert added.returncode == 0, added.stderr
    made = json.loads(added.stdout)
    assert (made["events"], made["signed"]) == (["run_completed", "run_failed"], True)

    listed = durably_cli("webhooks", "list", "--store", store_url, cwd=tmp_path)
    assert made["id"] in listed.stdout
    assert "set" in listed.stdout
    assert "whsec_from_env" not in listed.stdout + listed.stderr
    none = durably_cli("webhooks", "deliveries", "--failed", "--store", store_url, cwd=tmp_path)
    assert none.stdout.endswith("(no dead delivery)\n")
    removed = durably_cli("webhooks", "remove", made["id"], "--store", store_url, cwd=tmp_path)
    assert removed.stdout == f"webhook {made['id']} removed\n"

    refused(
        durably_cli(
            *("webhooks", "add", "https://h.example.com/", "--events", "run_oops"),
            *("--store", store_url),
            cwd=tmp_path,
        ),
        1,
        "unknown webhook event kind(s) 'run_oops': the kinds are run_completed",
    )
    refused(
        durably_cli(
            *("webhooks", "add", "gopher://h.example.com/", "--events", "run_failed"),
            *("--store", store_url),
            cwd=tmp_path,
        ),
        1,
        "scheme 'gopher'",
    )
    refused(
        durably_cli("webhooks", "remove", made["id"], "--store", store_url, cwd=tmp_path),
        1,
        f"no webhook has the id {made['id']!r}",
    )
    refused(
        durably_cli("webhooks", "retry", "777", "--store", store_url, cwd=tmp_path),
        1,
        "no webhook delivery has the id 777",
    )


def test_listen_prints_the_changes_another_process_commits(
    store_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    app = durably.App(store_url, clock=clock)

    @app.workflow
    def greet(name: str) -> str:
        return f"hello {name}"

    try:
        app.store  # noqa: B018 - made before anyone listens
        if not store_url.startswith("sqlite"):  # off by default
            off = durably_cli("changes", "--store", store_url, cwd=tmp_path)
            assert off.stdout == "the change stream is off\n", off.stderr
            on = durably_cli("changes", "on", "--store", store_url, cwd=tmp_path)
            assert on.stdout == "the change stream is on\n", on.stderr
        env = {k: v for k, v in os.environ.items() if k != "DURABLY_STORE"}
        listening = subprocess.Popen(
            [sys.executable, "-m", "durably", "listen", "--json", "--count", "2"],
            cwd=REPO,
            env={**env, "DURABLY_STORE": store_url},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert listening.stderr is not None
        assert listening.stderr.readline() == "listening (Ctrl-C stops)\n"
        app.start(greet, "ada", id="g-1")
        app.run_until_idle()
        out, _ = listening.communicate(timeout=30)
        changes = [json.loads(line) for line in out.splitlines()]
        assert [(c["run"], c["workflow"], c["status"]) for c in changes] == [
            ("g-1", "greet", "running"),
            ("g-1", "greet", "completed"),
        ]
    finally:
        app.close()
