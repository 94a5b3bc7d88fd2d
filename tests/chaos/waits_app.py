"""The app the wait tests run in real worker processes: a workflow that sleeps, one that
takes signals one by one, each followed by a step, one that asks for an approval nobody
gives, and a long step that heartbeats its progress. Its store is $DURABLY_STORE."""

from __future__ import annotations

import asyncio
import os

import durably


def build(app: durably.App) -> durably.App:
    @app.step
    async def note(item: int) -> int:
        return item

    @app.workflow
    async def nap(seconds: float) -> str:
        await durably.sleep(seconds)
        return "woke"

    @app.workflow
    async def collect(count: int) -> list[int]:
        items = []
        for _ in range(count):
            item = await durably.wait_for_signal("item")
            items.append(await note(item))
        return items

    @app.step
    async def ask_manager(request: durably.ApprovalRequest) -> str:
        return f"asked about {request.name}"  # a real app would mail request.token

    @app.workflow
    async def refund(amount: int) -> str:
        decision = await durably.approval(
            "refund", timeout="1s", on_timeout="reject", notify=ask_manager, details=amount
        )
        verdict = "approved" if decision.approved else "rejected"
        return f"{verdict} by {decision.by} ({decision.via})"

    @app.step(heartbeat_timeout="1s")
    async def export(chunks: int) -> dict[str, int]:
        start = durably.last_heartbeat() or {"done": 0}
        for done in range(start["done"], chunks):
            durably.heartbeat({"done": done})
            await asyncio.sleep(0.1)
        return {"resumed_from": start["done"], "chunks": chunks}

    @app.workflow
    async def nightly_export(chunks: int) -> dict[str, int]:
        return await export(chunks)  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
