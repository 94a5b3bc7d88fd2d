"""Calling a workflow's body: within its deadline, a sync body in a thread of its own, and
how it ended, which must leave no call its history records unmade (durably.core.replay's
check_followed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from durably.core.replay import StepRecord, check_followed
from durably.errors import (
    DeadlineExceeded,
    LeaseLost,
    NonDeterminismError,
    PayloadError,
    PoisonPill,
    UnsafeConcurrency,
)
from durably.runtime.attempts import within
from durably.runtime.flow import ContinueAsNew
from durably.runtime.threads import in_daemon_thread

__all__ = ["NOT_AN_ENDING", "call_body", "ending", "followed"]

# How a body stops that says nothing of where its code ends: its deadline passed (it was cut
# short), or the engine stopped it for a reason of its own, named already.
NOT_AN_ENDING = (
    DeadlineExceeded,
    LeaseLost,
    NonDeterminismError,
    UnsafeConcurrency,
    PayloadError,
    PoisonPill,
)


async def call_body(
    fn: Callable[..., Any],
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    is_async: bool,
    thread_name: str,
    deadline: datetime | None,
    now: datetime,
) -> Any:
    """Await the body `fn(*args, **kwargs)`; DeadlineExceeded once `deadline` passes."""
    remaining = None if deadline is None else (deadline - now).total_seconds()
    if deadline is not None and remaining is not None and remaining <= 0:
        raise DeadlineExceeded(f"the workflow's deadline passed at {deadline.isoformat()}")
    # A sync workflow gets a thread of its own, not one of the loop's pool: it blocks while
    # its steps run, and those may need the pool's threads.
    call = fn(*args, **kwargs) if is_async else in_daemon_thread(fn, args, kwargs, name=thread_name)
    if deadline is None or remaining is None:
        return await call
    message = f"the workflow's deadline passed at {deadline.isoformat()}"
    return await within(call, remaining, lambda: DeadlineExceeded(message))


async def followed(
    call: Awaitable[Any], steps: Sequence[StepRecord], calls_made: Callable[[], int]
) -> Any:
    """The body's value, once it returned having made every call its history records (how
    many it made: `calls_made()`, read when it ended); NonDeterminismError if it ended, by
    returning, raising or continuing as new, before a call its history records."""
    try:
        value = await call
    except NOT_AN_ENDING:
        raise
    except (ContinueAsNew, Exception) as ended:
        check_followed(steps, calls_made(), ending(ended))
        raise
    check_followed(steps, calls_made(), ending(None))
    return value


def ending(ended: BaseException | None) -> str:
    """How the body ended, in words: it returned (`ended` None), raised, or continued."""
    if isinstance(ended, ContinueAsNew):
        return "continues as new"
    if ended is not None:
        return f"raises {type(ended).__name__}"
    return "returns"
