"""What workflow code and steps publish for callers while a run goes on (the runtime's side is
durably.runtime.outputs; what it all means: durably.core.outputs).

    durably.set_event("status", "charging")           # handle.get_event("status")
    durably.progress(3, 5, "files copied")             # `durably runs show` draws a bar
    durably.write_stream("tokens", token)              # for token in handle.read_stream(...)
    durably.close_stream("tokens")                     # readers stop here

Each works in workflow code and in a step's body. From workflow code, a set or a write is
made once, whatever the replays; from a step, a retried attempt's writes at the places the
last attempt wrote are skipped (the first item at a place stays), so no reader sees an item
twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durably.codec.encoding import encode
from durably.codec.parameters import NO_HINT
from durably.core.outputs import PROGRESS, Progress, check_key
from durably.errors import NotInWorkflow
from durably.workflow.context import Publisher, current_execution, current_step, durable_call

__all__ = ["close_stream", "progress", "set_event", "write_stream"]


def set_event(key: str, value: Any) -> None:
    """Publish `value` (plain JSON, or what the codec encodes) under `key` on this run;
    callers read the latest value with `handle.get_event(key)`, waiting for it if it is not
    set yet."""
    check_key(key, "an event's")
    text = _encode(value, f"the value of event {key!r}")
    _publish("set_event", lambda publisher: publisher.set_event(key, text))


def progress(done: float, total: float | None = None, message: str | None = None) -> None:
    """Say how far the run got: `durably.progress(3, 5, "files copied")`. An event of its own
    (`durably.progress`), shown as a bar by `durably runs show`, `runs follow` and the
    dashboard; `handle.progress()` reads it."""
    said = Progress(done, total, message)
    _publish("progress", lambda publisher: publisher.set_event(PROGRESS, said.to_json()))


def write_stream(key: str, value: Any) -> None:
    """Append `value` to this run's stream `key`; callers read it, in order, with
    `handle.read_stream(key)`, from any process, while the run goes on."""
    check_key(key, "a stream's")
    text = _encode(value, f"an item of stream {key!r}")
    _publish("write_stream", lambda publisher: publisher.write(key, text))


def close_stream(key: str) -> None:
    """End the stream `key`: readers stop after its last item. A stream also ends for its
    readers when the run ends."""
    check_key(key, "a stream's")
    _publish("close_stream", lambda publisher: publisher.write(key, None))


def _encode(value: Any, what: str) -> str:
    """JSON that reads back as `value` (PayloadError, naming the part that does not, if not)."""
    return encode(value, NO_HINT, what=what)


def _publish(what: str, call: Callable[[Publisher], None]) -> None:
    scope = current_step()
    if scope is not None:
        if scope.outputs is None:  # a compensation or reconcile hook
            raise NotInWorkflow(
                f"durably.{what}() was called in a compensation or reconcile hook; call it in "
                "workflow code or in a step's body"
            )
        call(scope.outputs)
        return
    if current_execution() is None:
        raise NotInWorkflow(
            f"durably.{what}() was called outside a run; call it in workflow code or in a "
            "step's body while a worker runs it"
        )
    durable_call(what, lambda execution: call(execution.outputs), awaited=False)
