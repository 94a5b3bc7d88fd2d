"""Handing results from threads back to the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Outcome", "in_daemon_thread", "settle_all_threadsafe", "settle_threadsafe"]


Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]  # future, value, error


def settle_threadsafe(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    value: Any = None,
    error: BaseException | None = None,
) -> None:
    """Resolve `future` from another thread; nothing happens if nobody waits any more."""
    settle_all_threadsafe(loop, [(future, value, error)])


def settle_all_threadsafe(loop: asyncio.AbstractEventLoop, outcomes: Sequence[Outcome]) -> None:
    """Resolve many futures with one wake-up of the loop (one self-pipe write, not N)."""
    with contextlib.suppress(RuntimeError):  # the loop is closed
        loop.call_soon_threadsafe(_settle_all, outcomes)


def in_daemon_thread(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *, name: str
) -> asyncio.Future[Any]:
    """Run a sync call in a daemon thread of its own, with the caller's context variables.

    Unlike asyncio.to_thread, a call that hangs past its timeout can be abandoned: nothing
    joins the thread, so neither the event loop's shutdown nor the process exit waits for it.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            value = context.run(fn, *args, **kwargs)
        except BaseException as exc:
            settle_threadsafe(loop, future, error=exc)
        else:
            settle_threadsafe(loop, future, value)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def _settle_all(outcomes: Sequence[Outcome]) -> None:
    for future, value, error in outcomes:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
