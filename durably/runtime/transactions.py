"""Transactional steps (@app.transaction): a step body that writes the user's own tables,
through durably's connection, in the one transaction that records the step's start and
outcome (Store.transact). Either both commit or neither: a crash, a lost lease or a failed
body leaves no write and no outcome, and the step simply runs again; there is no "unknown"
attempt to reconcile.

The body runs in a thread of its own on a connection of the store's (PostgreSQL: one of the
pool's, so other runs' commits go on; SQLite: the file's single writer, so every other write
waits while the body runs: keep it short). A timeout abandons the attempt only if its
transaction has not begun committing; once it has, its outcome stands.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from durably.clock import Clock
from durably.codec.encoding import decode, encode
from durably.core.history import Event, EventKind
from durably.errors import (
    ConfigError,
    LeaseLost,
    StepTimeout,
    StoreUnavailable,
    TransactionAborted,
    TransactionEnded,
    UnsafeConcurrency,
)
from durably.runtime.attempts import observed
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.flow import CheckpointFailed
from durably.runtime.hooks import Hooks
from durably.runtime.threads import in_daemon_thread
from durably.stores.protocol import Store
from durably.stores.records import Checkpoint, Lease
from durably.workflow.context import StepScope, _step, at_frontier

if TYPE_CHECKING:
    from durably.workflow.definitions import Step

__all__ = ["TransactionConnection", "check_alone", "transact"]

# How the store says the body left its transaction in a state it cannot commit: the step's
# failure, like an exception of the body's own.
_LEFT_BADLY = (TransactionEnded, TransactionAborted)
_RETRY_FIRST, _RETRY_MAX = 0.05, 5.0  # seconds between tries while the store is unavailable
_KEPT = (
    "the transaction of a transactional step is durably's to end: return from the step to "
    "commit its writes with its outcome, raise to roll them back ({} is not for the step)"
)


class TransactionConnection:
    """The connection a transactional step writes through: the store's own (sqlite3 or
    psycopg), inside the transaction that records the step's outcome. Everything passes
    through but ending that transaction or the connection."""

    __slots__ = ("_db",)

    def __init__(self, db: Any) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def commit(self) -> None:
        raise ConfigError(_KEPT.format("commit()"))

    def rollback(self) -> None:
        raise ConfigError(_KEPT.format("rollback()"))

    def close(self) -> None:
        raise ConfigError(_KEPT.format("close()"))

    def __repr__(self) -> str:
        return f"<durably transaction connection {self._db!r}>"


def check_alone(step: Step, *, concurrent: bool) -> None:
    """A transactional step runs alone in its run: called from a branch of a gather, its
    outcome could commit ahead of a branch's earlier events."""
    if concurrent:
        raise UnsafeConcurrency(
            f"transactional step {step.name!r} was called from a concurrent branch (durably."
            "gather or asyncio.gather): a transactional step runs alone in its run. Call it "
            "before or after the gather, or write the branches' rows in one transactional step"
        )


async def transact(
    step: Step,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    scope: StepScope,
    *,
    writer: HistoryWriter,
    store: Store,
    clock: Clock,
    hooks: Hooks | None,
) -> Any:
    """One attempt of a transactional step whose start is pending in `writer` (everything
    before it committed). Returns its value, as a replay would see it, once its outcome and
    its writes are durable together. What the body raises (or a StepTimeout) comes out with
    nothing of the attempt written and its start pending again, to go with the failure.
    LeaseLost if the run was taken over; CheckpointFailed if the store failed."""
    at_frontier(f"step {step.name!r}")
    draft, seq = writer.draft(), writer.reserve()
    ticket = _Ticket()
    failed: list[BaseException] = []  # what the body raised, told from the store's errors
    made: list[Event] = []
    entered = False  # the store began the work: a failure now may have come after the body

    def work(db: Any) -> Checkpoint:
        nonlocal entered
        entered = True
        token = _step.set(replace(scope, connection=TransactionConnection(db)))
        try:
            with observed(hooks, scope, None):
                value = step.fn(*args, **kwargs)
            result = encode(value, step.return_hint, what=f"the result of step {step.name!r}")
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            _step.reset(token)
        made.append(
            Event(
                seq,
                EventKind.STEP_COMPLETED,
                clock.now(),
                scope.position,
                scope.name,
                scope.attempt,
                result,
            )
        )
        return replace(draft, events=(*draft.events, made[0]))

    def committing() -> None:
        if not ticket.commit():
            raise _Abandoned  # its timeout passed: nobody waits for this outcome
        if hooks is not None:
            hooks.before_commit(1)

    def run() -> bool:
        lease, pause = Lease(writer.run_id, writer.epoch), _RETRY_FIRST
        while True:
            try:
                held = store.transact(lease, work, now=clock.now(), committing=committing)
                break
            except StoreUnavailable:
                if entered or not ticket.waits(pause):  # it began, or nobody waits for it
                    raise
                pause = min(pause * 2, _RETRY_MAX)  # the store is down: its work never began
        if held and hooks is not None:
            hooks.checkpoint_committed(1)
        return held

    future = in_daemon_thread(run, (), {}, name=f"durably-transaction-{step.name}")
    try:
        held = await _settled(future, ticket, step)
    except (StepTimeout, asyncio.CancelledError):
        future.add_done_callback(_unheard)
        if ticket.abandon():  # it will roll back, if it has not already
            writer.restore(draft)
            writer.unreserve(seq)
        raise  # else it is committing: its outcome stands, and the history will say it
    except Exception as exc:
        if not ((failed and exc is failed[0]) or isinstance(exc, _LEFT_BADLY)):
            writer.lost = True
            raise CheckpointFailed(exc) from exc
        writer.restore(draft)  # the body failed: its transaction rolled back
        writer.unreserve(seq)
        raise
    if not held:
        writer.lost = True
        raise LeaseLost(
            f"run {writer.run_id!r}: lease epoch {writer.epoch} was taken over by another "
            "worker; the transactional step's writes were rolled back"
        )
    writer.committed(made[0])
    assert made[0].data is not None
    return decode(made[0].data, step.return_hint, what=f"the result of step {step.name!r}")


async def _settled(future: asyncio.Future[bool], ticket: _Ticket, step: Step) -> bool:
    """The transaction's answer, or StepTimeout once the step's timeout passes, unless the
    transaction is committing by then (then its answer, however long it takes)."""
    timeout = step.options.timeout
    if timeout is None:
        return await future
    limit = asyncio.timeout(timeout.total_seconds())
    try:
        async with limit:
            return await asyncio.shield(future)
    except TimeoutError:
        if not limit.expired():  # the body's own TimeoutError
            raise
    if not ticket.abandon():
        return await future
    raise StepTimeout(f"step {step.name!r} attempt ran past its timeout of {timeout}")


def _unheard(future: asyncio.Future[bool]) -> None:
    """The answer of a transaction nobody waits for any more: taken, so nothing says it was
    never retrieved."""
    if not future.cancelled():
        future.exception()


class _Abandoned(Exception):
    """Raised at the commit of a transaction whose attempt timed out: it rolls back."""


class _Ticket:
    """Who decides an attempt's fate: its transaction, by beginning to commit, or its timeout,
    by abandoning it. Whichever comes first; the other then gives way."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "running"
        self._abandoned = threading.Event()

    def commit(self) -> bool:
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state = "committing"
            return True

    def abandon(self) -> bool:
        with self._lock:
            if self._state == "committing":
                return False
            self._state = "abandoned"
            self._abandoned.set()
            return True

    def waits(self, seconds: float) -> bool:
        """Pause `seconds` before another try; False (at once) if the attempt was abandoned."""
        return not self._abandoned.wait(seconds)
