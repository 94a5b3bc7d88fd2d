"""durably.patched and durably.deprecated_patch in a running workflow (durably.core.patches):
the run's decisions so far, the new ones appended to its history."""

from __future__ import annotations

import json
from collections.abc import Callable

from durably.core.history import EventKind
from durably.core.patches import check_retired, decide, fold_patches
from durably.runtime.checkpoints import HistoryWriter

__all__ = ["Patches"]

# Where the workflow body is: its next position, and whether the history holds calls from
# there on (it replays a history recorded past this point).
Where = Callable[[], tuple[int, bool]]


class Patches:
    def __init__(self, writer: HistoryWriter, where: Where) -> None:
        self._writer = writer
        self._where = where
        self._decided: dict[str, bool] | None = None  # read from the history on first use

    def patched(self, patch_id: str) -> bool:
        """Which side of the patch the run takes: decided once, recorded, then kept."""
        decided = self._known()
        if patch_id in decided:
            return decided[patch_id]
        _, replaying = self._where()
        side = decided[patch_id] = decide(decided, patch_id, replaying=replaying)
        self._writer.append(EventKind.PATCH_DECIDED, name=patch_id, data=json.dumps(side))
        return side

    def retired(self, patch_id: str) -> None:
        """The code has only the patch's new side: NonDeterminismError if this run cannot
        follow it."""
        position, replaying = self._where()
        check_retired(self._known(), patch_id, position=position, replaying=replaying)
        self.patched(patch_id)  # the new side, recorded: a replay past here finds it

    def _known(self) -> dict[str, bool]:
        if self._decided is None:
            self._decided = fold_patches(self._writer.events)
        return self._decided
