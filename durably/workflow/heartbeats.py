"""Heartbeats from inside a long step: `heartbeat(details)` says it is alive and how far it
got; `last_heartbeat()` tells a new attempt where the last one stopped (the engine's side is
runtime/heartbeats.py)."""

from __future__ import annotations

import json
from typing import Any

from durably.codec.encoding import encode
from durably.codec.parameters import NO_HINT
from durably.errors import DurablyError, PayloadError
from durably.workflow.context import step_scope

__all__ = ["heartbeat", "last_heartbeat"]


def heartbeat(details: Any = None) -> None:
    """Tell durably a long step is alive, with how far it got (`details`, plain JSON). With
    `@app.step(heartbeat_timeout=...)`, an attempt whose heartbeats stop is lost (retried);
    the latest details are recorded and handed to the next attempt (last_heartbeat)."""
    scope = step_scope("heartbeat")
    try:
        text = encode(details, NO_HINT, what="the heartbeat's details")
    except PayloadError as exc:
        raise DurablyError(str(exc)) from None
    assert scope.beats is not None
    scope.beats.beat(text)


def last_heartbeat() -> Any:
    """The details of the last heartbeat an earlier attempt of this step recorded (None if
    none did): where to resume."""
    scope = step_scope("last_heartbeat")
    assert scope.beats is not None
    previous = scope.beats.previous
    return None if previous is None else json.loads(previous)
