"""The app of the schedule race test: `tests.chaos.schedule_app:app`, whose store is
$DURABLY_STORE. `pulse` ticks every second (every tick caught up, overlap allowed); its one
step journals "beat <tick>" to the file $SCHEDULE_LOG, so the test sees how often each tick
ran, whatever the number of workers racing for it."""

from __future__ import annotations

import os
from datetime import datetime

import durably
from tests.chaos.control_app import write

__all__ = ["app"]

app = durably.App(os.environ.get("DURABLY_STORE"))


@app.step
async def beat(tick: str) -> str:
    write(os.environ["SCHEDULE_LOG"], f"beat {tick}")
    return tick


@app.schedule(every="1s", overlap="allow", catchup="all", tick="at")
@app.workflow
async def pulse(at: datetime) -> str:
    return await beat(at.isoformat())  # type: ignore[no-any-return]
