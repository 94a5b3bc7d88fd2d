"""The app `durably schedules` is tried with in test_schedules: its store is the URL in
$CLI_APP_STORE (absolute), so that a command run from any directory finds it."""

from __future__ import annotations

import os
from datetime import datetime

import durably

app = durably.App(os.environ.get("CLI_APP_STORE"))


@app.schedule(cron="0 6 * * *", timezone="Europe/Berlin", tick="day")
@app.workflow
async def morning_report(day: datetime) -> str:
    return day.isoformat()
