"""A query while a real `durably worker` process holds the run in the middle of a step: it is
answered from this process, without the worker, from the run's last checkpoint; the step's
body does not run here, and the run's record and history stay exactly as the worker left
them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import durably
from durably.core.history import EventKind

from .processes import start_worker, wait_until
from .query_app import define

ITEMS = [{"sku": 1, "price": 3}, {"sku": 2, "price": 4}]


def test_a_run_held_mid_step_by_a_worker_answers_unchanged(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    ran: list[str] = []
    app = durably.App(store_url)
    define(app, ran)
    gate, log = tmp_path / "gate", tmp_path / "worker.log"
    try:
        handle = app.start("order", ITEMS, str(gate), id="o-1")
        # a long lease: no renewal of it changes the run's record during the test
        worker = start_worker(store_url, log, "--lease", "120s", target=TARGET)
        processes.append(worker)

        def holding() -> bool:
            return any(
                event.kind is EventKind.STEP_STARTED and event.name == "hold"
                for event in app.client.history("o-1")
            )

        wait_until("the worker starts the step 'hold'", holding, log)
        before = (app.client.get("o-1"), app.client.history("o-1"))
        assert before[0].status is durably.RunStatus.RUNNING
        assert handle.query("total") == 7  # as of the last checkpoint: two items priced
        assert handle.query("lines", 1) == [4]
        assert (app.client.get("o-1"), app.client.history("o-1")) == before
        assert ran == []  # no step body ran in this process, not even the one in flight

        gate.touch()  # the step ends; the worker prices one more item and waits

        def waiting() -> bool:
            return app.client.get("o-1").status is durably.RunStatus.PENDING

        wait_until("the run waits for the signal", waiting, log)
        assert handle.query("total") == 1007
        app.client.signal("o-1", "add", None)
        assert handle.result(timeout=30) == {"total": 1007}
        assert handle.query("lines", 2) == [1000]
        assert ran == []
    finally:
        app.close()


TARGET = "tests.integration.query_app:app"
