"""What workflow code reads from the world, made replay-safe: the time, ids and random
numbers (`now`, `uuid4`, `random`), and which side of a patch a run takes (`patched`).

Why they exist: a workflow body runs again on every replay, so anything it reads from the
world must come back the same. `datetime.now()` in a workflow body is a bug: after a crash
the replay sees another time, and a branch on it may take another path than the first run
did (durably then stops the run with a NonDeterminismError, or, worse, it repeats a step
with other arguments). `durably.now()` is read once and recorded; replays get the recorded
value. A patch's side is decided once per run and recorded too (core/patches.py).
"""

from __future__ import annotations

import json
import random as _random
import uuid as _uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from durably.core.patches import check_name
from durably.workflow.context import Execution, durable_call

__all__ = ["deprecated_patch", "now", "patched", "random", "uuid4"]

T = TypeVar("T")


def now() -> datetime:
    """The current time (UTC), recorded on first execution and the same on every replay."""
    return _recorded(
        "now",
        lambda execution: json.dumps(execution.clock_now().isoformat()),
        datetime.fromisoformat,
    )


def uuid4() -> _uuid.UUID:
    """A random UUID, recorded on first execution and the same on every replay."""
    return _recorded("uuid4", lambda _execution: json.dumps(str(_uuid.uuid4())), _uuid.UUID)


def random() -> float:
    """A random float in [0, 1), recorded on first execution and the same on every replay."""
    return _recorded("random", lambda _execution: json.dumps(_random.random()), float)


def patched(patch_id: str) -> bool:
    """Whether this run takes the new side of a change made under running workflows:
    `if durably.patched("fraud-check"): <new code> else: <old code>`. A run that got past this
    point before the change (its history follows the old code) takes the old side; every other
    run the new one. Decided the first time the run gets here, recorded, and the same on every
    replay. It takes no place in the history: no step after it moves."""
    check_name(patch_id)
    side: bool = durable_call(
        "patched", lambda execution: execution.patches.patched(patch_id), awaited=False
    )
    return side


def deprecated_patch(patch_id: str) -> None:
    """Say that the patch `patch_id` is retired: the code has only its new side now. A run
    that took the old side (or got past this point before the patch) cannot follow this code
    and is parked with NonDeterminismError; `durably runs list --patch ID` lists such runs
    before you deploy."""
    check_name(patch_id)
    durable_call(
        "deprecated_patch", lambda execution: execution.patches.retired(patch_id), awaited=False
    )


def _recorded(kind: str, make: Callable[[Execution], str], read: Callable[[Any], T]) -> T:
    def value(execution: Execution) -> T:
        return read(json.loads(execution.waits.value(kind, lambda: make(execution))))

    result: T = durable_call(kind, value, awaited=False)
    return result
