"""durably.patched: a change made under running workflows, decided once per run and recorded.

A patch takes no position in the history, so adding `if durably.patched("id"):` around new
code (or removing it later) never shifts the steps after it. The first time a run reaches a
patch, its side is decided and recorded (a `patch_decided` event):
- the new code (True) when the run is at the edge of its history, going where it never went;
- the old code (False) when the run replays a history recorded past this point: it got there
  before the patch existed, and its history follows the old code.
Every later call in the run, and every replay, answers what was recorded.

Retiring a patch (`durably.deprecated_patch("id")`, once the code has only the new side): a run
whose history took the old side, or that replays past the point without a decision (it
predates the patch), cannot follow this code, and is parked with NonDeterminismError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from durably.core.history import Event, EventKind
from durably.errors import DurablyError, NonDeterminismError

__all__ = ["check_name", "check_retired", "decide", "fold_patches"]


def check_name(patch_id: object) -> str:
    if not isinstance(patch_id, str) or not patch_id.strip():
        raise DurablyError(f"a patch's id must be a non-empty string, not {patch_id!r}")
    return patch_id


def fold_patches(events: Iterable[Event]) -> dict[str, bool]:
    """The side each patch the run reached took: id -> True (new code) or False (old)."""
    return {
        str(event.name): bool(json.loads(event.data or "false"))
        for event in events
        if event.kind is EventKind.PATCH_DECIDED
    }


def decide(decided: Mapping[str, bool], patch_id: str, *, replaying: bool) -> bool:
    """The side of `patch_id` for a run that reaches it: the recorded one, else the old code
    if the run replays a history recorded past this point, else the new code."""
    recorded = decided.get(patch_id)
    return recorded if recorded is not None else not replaying


def check_retired(
    decided: Mapping[str, bool], patch_id: str, *, position: int, replaying: bool
) -> None:
    """NonDeterminismError if the run cannot follow code that has only the patch's new side."""
    recorded = decided.get(patch_id)
    if recorded is True or (recorded is None and not replaying):
        return
    how = "took its old side" if recorded is False else "got past it before the patch existed"
    raise NonDeterminismError(
        position=position,
        recorded=f"patch {patch_id!r}: old code",
        called=f"patch {patch_id!r} retired",
        why=(
            f"patch {patch_id!r} is retired (durably.deprecated_patch), but this run {how}: "
            "its history follows the old code, which is gone. Bring the `if durably.patched(...)` "
            "back until no such run is left (durably runs list --patch "
            f"{patch_id} lists them), or fail the run"
        ),
    )
