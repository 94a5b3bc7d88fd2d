"""What the SQLite store tells other processes of the same machine, after its commits, best
effort (durably.stores.sqlite.wakeups says how: a datagram to each listening process): runs
due now (to idle workers), runs that ended (to waiting handles), runs that published events or
stream items (to callers waiting on them), and every status change (to `durably listen`),
which a connection gathers as its transaction goes (ChangingConnection)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from durably.core.status import FINAL, PARKED
from durably.core.webhooks import StatusChange
from durably.stores.records import Checkpoint
from durably.stores.sqlite.wakeups import LocalWakeups, run_messages

__all__ = ["ChangingConnection", "Notices"]


class Notices:
    """The store's four channels, one directory of sockets each."""

    def __init__(self, path: str) -> None:
        self._due = LocalWakeups(path)
        self._finishes = LocalWakeups(path, "done")  # runs that ended, to waiting handles
        self._outputs = LocalWakeups(path, "outputs")  # runs that published, to callers
        self._changes = LocalWakeups(path, "changes")  # every status change: durably listen

    def due(self) -> None:
        """Runs are due now: idle workers look (a worker woken before the commit would find
        nothing, so only after it)."""
        self._due.notify()

    def committed(
        self, checkpoints: Sequence[Checkpoint], results: list[bool], due_now: bool
    ) -> None:
        """Wake workers for runs made due, handles for runs that ended, and callers waiting on
        runs that set events."""
        if due_now:
            self._due.notify()
        done = [c for c, ok in zip(checkpoints, results, strict=True) if ok]
        ended = [c.run_id for c in done if _ends(c)]
        if ended:
            self._finishes.notify(run_messages(ended))
        self.published([c.run_id for c in done if c.publishes])

    def published(self, run_ids: list[str]) -> None:
        if run_ids:
            self._outputs.notify(run_messages(run_ids))

    def changes_listened(self) -> bool:
        return self._changes.listened()

    def changes(self, lines: list[str]) -> None:
        self._changes.notify(run_messages(lines))

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        return self._due.watch(lambda _message: wake())

    def watch_finished(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        return self._finishes.watch(lambda message: _heard(wake, message))

    def watch_outputs(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        return self._outputs.watch(lambda message: _heard(wake, message))

    def watch_status_changes(self, heard: Callable[[StatusChange], None]) -> Callable[[], None]:
        def received(message: bytes) -> None:
            for line in message.decode().splitlines():
                heard(StatusChange.from_json(line))

        return self._changes.watch(received)

    def close(self) -> None:
        for channel in (self._due, self._finishes, self._outputs, self._changes):
            channel.close()


class ChangingConnection(sqlite3.Connection):
    """A connection that keeps the status changes of its transaction (a temporary trigger
    calls `changed`), for the store to send once it has committed (durably listen)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changes: list[tuple[str, str, str, float]] = []  # run, workflow, status, at
        self.gathering = False  # whether its trigger gathers them

    def changed(self, run_id: str, workflow: str, status: str, at: float) -> None:
        self.changes.append((run_id, workflow, status, at))

    def sent_changes(self) -> list[str]:
        """The changes it gathered, as the lines the listeners read (StatusChange.from_json);
        none gathered from then on, until the next."""
        keys = ("run", "workflow", "status", "at")
        lines = [json.dumps(dict(zip(keys, change, strict=True))) for change in self.changes]
        self.changes.clear()
        return lines

    def gather_changes(self, on: bool) -> None:
        """Make or drop the trigger that gathers them: temporary, this connection's own, so
        that another program's connection (the sqlite3 shell), which knows no
        durably_status_changed, is never asked to call it. Outside a transaction."""
        if not on:
            self.execute("DROP TRIGGER IF EXISTS temp.durably_status_changes")
        elif self.execute("SELECT 1 FROM sqlite_master WHERE name = 'durably_runs'").fetchone():
            self.execute(
                "CREATE TEMP TRIGGER IF NOT EXISTS durably_status_changes"
                " AFTER UPDATE OF status ON main.durably_runs WHEN NEW.status IS NOT OLD.status"
                " BEGIN SELECT durably_status_changed(NEW.id, NEW.workflow, NEW.status,"
                " NEW.updated_at); END"
            )
        else:
            return  # no runs table yet: the next write transaction looks again
        self.gathering = on


def _heard(wake: Callable[[str | None], None], message: bytes) -> None:
    """A datagram of run ids, one a line, given to `wake` one by one (empty: any run)."""
    if not message:
        wake(None)
    for run_id in message.decode().splitlines():
        wake(run_id)


def _ends(checkpoint: Checkpoint) -> bool:
    """Whether a checkpoint ends its run (for now, if parked): handles waiting hear of it."""
    return checkpoint.status in FINAL or checkpoint.status in PARKED
