"""durably.gather: durable calls of an async workflow at once, each at its place in the
history (the engine's side is runtime/fanout.py)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any

from durably.errors import DurablyError
from durably.workflow.context import here

__all__ = ["gather"]


async def gather(
    *calls: Awaitable[Any],
    return_exceptions: bool = False,
    cancel_on_failure: bool = True,
    limit: int | None = None,
) -> list[Any]:
    """Run durable calls at once (step calls, e.g. `await durably.gather(charge(a), ship(b))`)
    and return their results in call order. Each takes its place in the history in the order
    the calls were made, so replay finds it whatever order they finished in.

    If a call fails for good, the others are cancelled (`cancel_on_failure=False`: they run
    to their end) and the first failure in call order is raised; with `return_exceptions`
    the failures are returned in place instead and nothing is cancelled. At most `limit`
    calls run at once (default: the worker's concurrency). A branch makes one durable call:
    for several steps in a row, use a workflow of their own. Async workflows only."""
    execution = here("gather")
    refusal = None
    if not execution.is_async:
        refusal = (
            "durably.gather() runs calls of an async workflow; in a sync workflow, call the "
            "steps one after another (or make the workflow async)"
        )
    elif limit is not None and limit < 1:
        refusal = f"durably.gather(limit=...) must be at least 1, not {limit}"
    if refusal is not None:
        for call in calls:  # none of them runs
            if inspect.iscoroutine(call):
                call.close()
        raise DurablyError(refusal)
    return await execution.gather(
        list(calls),
        limit=limit,
        return_exceptions=return_exceptions,
        cancel_on_failure=cancel_on_failure,
    )
