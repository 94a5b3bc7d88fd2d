"""Structured logs on both stores: a record emitted while a run executes carries the run's id
and workflow, and inside a step its name and attempt (the engine's own lines and the app's
alike); `durably --log-format json worker` writes them as one JSON object a line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import Retry, RunStatus
from durably.observability.logs import JsonFormatter, RunContext
from durably.testing import FakeClock

from .cli_app import Order, make_app
from .processes import REPO, wait_until


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """JSON lines of the loggers "durably" and "shop" (the app's), whatever an earlier test of
    the suite did to the root logger: the handler is on them, at INFO."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RunContext())
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger(name) for name in ("durably", "shop", "durably.execution")]
    saved = [(logger.level, logger.propagate, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
        logger.disabled = False
    for logger in loggers[:2]:
        logger.addHandler(handler)
        logger.propagate = False  # one line each, here
    try:
        yield out
    finally:
        for logger in loggers[:2]:
            logger.removeHandler(handler)
        for logger, (level, propagate, disabled) in zip(loggers, saved, strict=True):
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled


def test_lines_about_a_run_carry_its_id_and_step(
    app: durably.App, clock: FakeClock, json_lines: io.StringIO
) -> None:
    tries = iter([ConnectionError("reset")])

    @app.step(retry=Retry(attempts=2, initial="1s"))
    async def charge(order: str) -> str:
        logging.getLogger("shop").info("charging %s", order)
        if (error := next(tries, None)) is not None:
            raise error
        return order

    @app.workflow
    async def checkout(order: str) -> str:
        return await charge(order)  # type: ignore[no-any-return]

    handle = app.start(checkout, "o-1", id="o-1")
    app.run_until_idle()
    clock.advance("1s")
    app.run_until_idle()
    assert handle.result(timeout=0) == "o-1"

    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    mine = [line for line in lines if line["logger"] == "shop"]
    assert [(line["step"], line["attempt"]) for line in mine] == [("charge", 1), ("charge", 2)]
    assert {line["run_id"] for line in mine} == {"o-1"}
    assert {line["workflow"] for line in mine} == {"checkout"}
    [retry] = [line for line in lines if "retry at" in line["message"]]
    assert (retry["logger"], retry["run_id"], retry["level"]) == (
        "durably.execution",
        "o-1",
        "WARNING",  # a failed attempt, with where it raised on the lines below
    )
    assert "step" not in retry  # said after the attempt, outside it
    assert "\nTraceback (most recent call last):\n" in retry["message"]


def test_the_worker_command_writes_json_lines(store_url: str, tmp_path: Path) -> None:
    app = make_app(store_url)
    log = tmp_path / "worker.log"
    try:
        handle = app.start("fulfil", Order("o-2", -1), id="o-2")  # refused: parked at once
        env = {**os.environ, "CLI_APP_STORE": store_url, "PYTHONPATH": str(REPO)}
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "durably",
                    "--log-format",
                    "json",
                    "worker",
                    "tests.integration.cli_app:app",
                    "--name",
                    "json-worker",
                ],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until("o-2 parked", lambda: handle.status() is RunStatus.NEEDS_ATTENTION, log)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    finally:
        app.close()

    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert lines, log.read_text()
    [parked] = [line for line in lines if "parked" in line["message"]]
    assert (parked["run_id"], parked["workflow"], parked["level"]) == ("o-2", "fulfil", "WARNING")
    assert any(line["message"].startswith("worker json-worker started") for line in lines)
