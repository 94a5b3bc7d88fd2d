"""Debounced starts with a real worker process: a hundred starts of one key, made while the
worker polls, make one run, whose side effect (a line in a journal the engine never touches)
happens exactly once, with the last start's input, once the starts stop; the next burst,
after the run began, makes the next run and its one effect."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from tests.chaos.control_app import journal
from tests.chaos.debounce_app import build
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

STARTS = 100
WINDOW = "2s"  # the starts take a fraction of it; the worker polls every 50 ms meanwhile


@pytest.mark.timeout(120)
def test_a_hundred_debounced_starts_have_their_effect_once_with_the_last_input(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    effects, worker_log = tmp_path / "effects.txt", tmp_path / "worker.log"
    log = str(effects)
    try:
        processes.append(
            start_worker(
                store_url, worker_log, "--poll", "50ms", target="tests.chaos.debounce_app:app"
            )
        )
        wait_until("the worker started", lambda: " started " in worker_log.read_text(), worker_log)

        handles = [
            client.start("reindex", n, log, debounce=WINDOW, debounce_key="catalogue")
            for n in range(STARTS)
        ]

        assert len({handle.id for handle in handles}) == 1
        assert handles[-1].result(timeout=60) == STARTS - 1
        run = client.client.get(handles[0].id)
        assert (run.status, run.gathered, run.gathering) == (RunStatus.COMPLETED, STARTS, False)
        assert journal(effects) == [f"reindex {STARTS - 1}"]
        assert [run.id for run in client.client.runs().runs] == [handles[0].id]

        # the run began: the next burst of the key makes the next run, and its one effect
        later = [
            client.start("reindex", n, log, debounce=WINDOW, debounce_key="catalogue")
            for n in range(STARTS, STARTS + 10)
        ]
        assert len({handle.id for handle in later} | {handles[0].id}) == 2
        assert later[0].result(timeout=60) == STARTS + 9
        assert journal(effects) == [f"reindex {STARTS - 1}", f"reindex {STARTS + 9}"]
    finally:
        client.close()
