"""The one table of run-status transitions."""

from __future__ import annotations

import itertools

import pytest

from durably.core.status import FINAL, TRANSITIONS, RunStatus, check_transition

S = RunStatus


def test_every_status_has_a_row() -> None:
    assert set(TRANSITIONS) == set(RunStatus)
    for targets in TRANSITIONS.values():
        assert targets <= set(RunStatus)


@pytest.mark.parametrize("terminal", [S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT])
def test_completed_failed_cancelled_and_timed_out_are_terminal(terminal: RunStatus) -> None:
    assert TRANSITIONS[terminal] == frozenset()
    for target in RunStatus:
        with pytest.raises(ValueError, match=f"cannot move from {terminal} to {target}"):
            check_transition(terminal, target)


def test_parked_runs_only_move_when_a_person_takes_them_or_a_parent_cancels_them() -> None:
    """A person retries, skips or fails it: the action leases the run, then hands it back. A
    parent's cancel makes its parked child pending (a failed undo waits for a person)."""
    assert TRANSITIONS[S.COMPENSATION_FAILED] == {S.RUNNING}
    assert TRANSITIONS[S.NEEDS_ATTENTION] == {S.RUNNING, S.PENDING}
    assert TRANSITIONS[S.PAUSED] == {S.RUNNING, S.PENDING}


def test_the_final_states() -> None:
    assert {S.COMPLETED, S.FAILED, S.TIMED_OUT, S.CANCELLED} == FINAL
    assert S.NEEDS_ATTENTION not in FINAL  # parked for a person, not over
    assert S.RUNNING not in FINAL
    assert S.PENDING not in FINAL


def test_only_a_running_run_reaches_an_outcome() -> None:
    outcomes = {S.COMPLETED, S.FAILED, S.NEEDS_ATTENTION, S.TIMED_OUT}
    for old, targets in TRANSITIONS.items():
        if old is not S.RUNNING:
            assert not (targets & outcomes), old


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.PENDING, S.RUNNING),  # claimed
        (S.PENDING, S.CANCELLED),
        (S.RUNNING, S.RUNNING),  # taken over after the lease expired
        (S.RUNNING, S.PENDING),  # released, or waiting for a due time
        (S.RUNNING, S.COMPLETED),
        (S.RUNNING, S.FAILED),
        (S.RUNNING, S.NEEDS_ATTENTION),
        (S.RUNNING, S.CANCELLED),
        (S.NEEDS_ATTENTION, S.RUNNING),  # a person takes it to act on it
        (S.COMPENSATION_FAILED, S.RUNNING),
    ],
)
def test_allowed_moves(old: RunStatus, new: RunStatus) -> None:
    check_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.PENDING, S.COMPLETED),  # nothing finishes without having run
        (S.PENDING, S.FAILED),
        (S.PENDING, S.NEEDS_ATTENTION),
        (S.PENDING, S.PENDING),
        (S.COMPENSATION_FAILED, S.PENDING),  # a person's action goes through a lease
        (S.FAILED, S.PENDING),  # failed is final
        (S.NEEDS_ATTENTION, S.COMPLETED),
        (S.FAILED, S.RUNNING),
        (S.FAILED, S.COMPLETED),
        (S.COMPLETED, S.PENDING),
        (S.COMPLETED, S.FAILED),
        (S.CANCELLED, S.PENDING),
    ],
)
def test_forbidden_moves_raise_value_error(old: RunStatus, new: RunStatus) -> None:
    with pytest.raises(ValueError, match=f"a run cannot move from {old} to {new}"):
        check_transition(old, new)


def test_check_transition_agrees_with_the_table_everywhere() -> None:
    for old, new in itertools.product(RunStatus, repeat=2):
        if new in TRANSITIONS[old]:
            check_transition(old, new)
        else:
            with pytest.raises(ValueError, match="cannot move"):
                check_transition(old, new)


def test_statuses_are_their_stored_strings() -> None:
    for status in RunStatus:
        assert str(status) == status.value
        assert RunStatus(status.value) is status
    assert S.NEEDS_ATTENTION == "needs_attention"
