"""The patch rule as plain data: the recorded side wins; else a run replaying past the point
takes the old side, one at the edge of its history the new; a retired patch refuses runs
that took the old side or got past it before the patch."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from durably.core.history import Event, EventKind
from durably.core.patches import check_name, check_retired, decide, fold_patches
from durably.errors import DurablyError, NonDeterminismError

AT = datetime(2026, 1, 1, tzinfo=UTC)


def decision(seq: int, name: str, side: bool) -> Event:
    return Event(seq, EventKind.PATCH_DECIDED, AT, None, name, None, "true" if side else "false")


def test_the_recorded_side_wins_else_replaying_means_old() -> None:
    decided = fold_patches([decision(3, "a", False), decision(9, "b", True)])
    assert decided == {"a": False, "b": True}
    assert decide(decided, "a", replaying=False) is False
    assert decide(decided, "b", replaying=True) is True
    assert decide(decided, "c", replaying=True) is False
    assert decide(decided, "c", replaying=False) is True


@pytest.mark.parametrize(
    ("decided", "replaying", "refused"),
    [
        ({"p": True}, True, False),
        ({}, False, False),
        ({"p": False}, False, True),
        ({}, True, True),
    ],
)
def test_a_retired_patch_refuses_only_runs_on_its_old_side(
    decided: dict[str, bool], replaying: bool, refused: bool
) -> None:
    if refused:
        with pytest.raises(NonDeterminismError, match="patch 'p' is retired"):
            check_retired(decided, "p", position=4, replaying=replaying)
    else:
        check_retired(decided, "p", position=4, replaying=replaying)


def test_a_patch_id_is_a_non_empty_string() -> None:
    assert check_name("fraud-check") == "fraud-check"
    for bad in ("", "  ", None, 3):
        with pytest.raises(DurablyError, match="non-empty string"):
            check_name(bad)
