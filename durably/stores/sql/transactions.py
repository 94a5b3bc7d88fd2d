"""The store side of a transactional step (Store.transact), shared by both stores: the lease
check before the user's work runs, and the user's exception carried out of the store's own
error handling unchanged (a user's failed SQL statement is the step's failure, never a store
outage)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from durably.errors import TransactionAborted, TransactionEnded
from durably.stores.records import Checkpoint, Lease
from durably.stores.sql.reads import Connection, Dialect

__all__ = ["Refused", "holds", "user_errors", "work_in"]

Work = Callable[[Any], Checkpoint]

_ABORTED = (
    "a statement of the transactional step failed and the step went on: PostgreSQL aborted the "
    "transaction, so nothing of it was written. Let the error fail the step, or run the "
    "statement that may fail in a savepoint (with durably.connection().transaction(): ...)"
)

_ENDED_BY_WORK = (
    "the transactional step ended its transaction itself (a COMMIT or ROLLBACK statement): its "
    "writes may be durable without its outcome recorded. Return to commit, raise to roll back"
)


class Refused(Exception):
    """The checkpoint was not fenced in after the work ran: roll everything back."""


class _WorkFailed(Exception):
    """The user's work raised `error`: carried past the store's handlers as it is."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def holds(db: Connection, dialect: Dialect, lease: Lease) -> bool:
    """Whether `lease` is still the run's: checked before the user's work, so that a worker
    that lost the run runs none of it (the checkpoint's own fence decides at the end)."""
    mark = dialect.mark
    row = db.execute(
        f"SELECT 1 FROM durably_runs WHERE id = {mark} AND lease_epoch = {mark}"
        " AND status = 'running'",
        (lease.run_id, lease.epoch),
    ).fetchone()
    return row is not None


def work_in(work: Work, db: Any, left: Callable[[], str]) -> Checkpoint:
    """`work(db)`; what it raises goes out wrapped, to be unwrapped by `user_errors`. `left()`
    says how the work left the transaction: "open" (as it should), "ended" (a COMMIT or
    ROLLBACK statement of its own: it fails for good, since its writes may be durable without
    the step's outcome), or "aborted" (PostgreSQL: a statement failed and the work went on:
    nothing of it is written, and the attempt fails)."""
    try:
        checkpoint = work(db)
    except Exception as exc:
        raise _WorkFailed(exc) from exc
    state = left()
    if state == "ended":
        raise _WorkFailed(TransactionEnded(_ENDED_BY_WORK))
    if state == "aborted":
        raise _WorkFailed(TransactionAborted(_ABORTED))
    return checkpoint


@contextmanager
def user_errors() -> Iterator[None]:
    """Around the store's transaction: the user's exception comes out as it was raised (its
    own cause and context kept), after the transaction rolled back."""
    error: Exception | None = None
    try:
        yield
    except _WorkFailed as failed:
        error = failed.error
    if error is not None:
        raise error
