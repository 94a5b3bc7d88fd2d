"""PostgreSQL wake-ups: LISTEN on a connection and a thread of its own, for the channels on
which commits NOTIFY (runs due now; runs that ended; every status change, once turned on).

Behind a pooler in transaction mode (durably.stores.postgres.options) a LISTEN hears nothing:
the server connection it ran on serves other clients, and its notifications with it. There,
only a `listen_url` straight to the server is listened on; without one, `Wakeups` says once
that the store's processes poll instead."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import sql

from durably.errors import ConfigError, StoreUnavailable
from durably.stores.postgres.connections import redact
from durably.stores.sql.schema import CHANGES_TRIGGERS

__all__ = ["CHANGES_CHANNEL", "Listener", "Wakeups", "switch_changes"]

CHANGES_CHANNEL = "durably_changes"
_CHANGES_LOCK = 0x6475726163  # any fixed number; serialises concurrent switches

log = logging.getLogger("durably.store")


class Wakeups:
    """A store's listeners: each on a connection to `url` (the store's own, or a direct one
    given for listening), or none when `url` is None (behind a transaction pooler without a
    listen_url): then the callers poll, as they do for a wake-up that is lost."""

    def __init__(self, url: str | None, shown_url: str, notify: Callable[[str], None]) -> None:
        self._url, self._shown_url, self._notify = url, shown_url, notify
        self._warned = threading.Event()

    def listen(
        self, channel: str, wake: Callable[[str | None], None], *, needed_by: str = ""
    ) -> Callable[[], None]:
        """Start listening on `channel` (returns once LISTEN is in effect); the call that
        stops it. Without a URL to listen on: ConfigError if `needed_by` (a wake-up with no
        poll behind it) names what needs it, else a no-op and a warning, once."""
        if self._url is None:
            if needed_by:
                raise ConfigError(
                    f"{needed_by} is heard only by LISTEN, which a transaction pooler "
                    f"(pgbouncer=transaction in the URL of {self._shown_url}) does not carry: "
                    "add listen_url=<a URL straight to the same database, not through the "
                    "pooler, percent-encoded> to the store URL"
                )
            if not self._warned.is_set():
                self._warned.set()
                log.warning(
                    "wake-ups are not heard through a transaction pooler (pgbouncer=transaction "
                    "in the URL of %s): polling instead, so a worker finds new runs every "
                    "--poll and a waiting handle its run's end every poll; add listen_url=<a "
                    "URL straight to the same database> to the store URL to hear them at once",
                    self._shown_url,
                )
            return _deaf
        poke = functools.partial(self._notify, channel)
        return Listener(self._url, redact(self._url), channel, wake, poke).stop


def _deaf() -> None:
    """Stops nothing: nothing listened."""


class Listener:
    """LISTEN on a channel on a connection of its own, in a thread of its own; `wake` gets
    each notification's payload, and None after the connection was lost and is back.

    If the connection drops, it reconnects with backoff; meanwhile (and for any NOTIFY that
    is missed) the worker's poll finds due runs, and a waiting handle's poll its run's end.
    """

    def __init__(
        self,
        url: str,
        shown_url: str,
        channel: str,
        wake: Callable[[str | None], None],
        poke: Callable[[], None],
    ) -> None:
        self._url, self._shown_url, self._wake, self._poke = url, shown_url, wake, poke
        self._channel = channel
        self._name = f"{channel} pid {os.getpid()}"
        self._stopping = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="durably-listen", daemon=True)
        self._thread.start()
        # Return once LISTEN is in effect, so that whatever the caller looks at next, nothing
        # started afterwards goes unheard (unless the server is slow to answer: then polling).
        self._listening.wait(timeout=5)

    def stop(self) -> None:
        self._stopping.set()
        with suppress(StoreUnavailable, psycopg.Error):
            self._poke()  # out of its wait now, not at its timeout
        self._thread.join(timeout=5)

    def _listen(self) -> None:
        pause, interrupted = 0.1, False
        while not self._stopping.is_set():
            try:
                with psycopg.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=5,
                    application_name=self._name,  # which process listens, in pg_stat_activity
                ) as db:
                    db.execute(f"LISTEN {self._channel}")
                    self._listening.set()
                    pause = 0.1
                    if interrupted:  # anything that happened while not listening
                        self._wake(None)
                        interrupted = False
                    while not self._stopping.is_set():
                        for notice in db.notifies(timeout=0.5, stop_after=1):
                            if not self._stopping.is_set():
                                self._wake(notice.payload)
            except psycopg.Error as exc:
                log.warning(
                    "wake-ups from %s interrupted (%s); polling until they are back",
                    self._shown_url,
                    redact(str(exc).strip()),
                )
                interrupted = True
                self._stopping.wait(pause)
                pause = min(pause * 2, 5.0)


def switch_changes(db: psycopg.Connection[Any], on: bool | None) -> bool:
    """Turn the change stream on (make the triggers that NOTIFY CHANGES_CHANNEL of every
    status change: durably.stores.sql.schema) or off (drop them), in the caller's transaction;
    whether it is on. Triggers rather than a setting they read: while off, they cost nothing.
    Making or dropping them needs the table's owner, like a migration."""
    db.execute("SELECT pg_advisory_xact_lock(%s)", (_CHANGES_LOCK,))
    made = {
        name
        for (name,) in db.execute(
            "SELECT tgname FROM pg_trigger WHERE tgname = ANY(%s)"
            " AND tgrelid = 'durably_runs'::regclass",
            (list(CHANGES_TRIGGERS),),
        )
    }
    is_on = "durably_runs_changes" in made
    for name, create in CHANGES_TRIGGERS.items():
        if on and name not in made:
            db.execute(create)
        elif on is False and name in made:
            db.execute(sql.SQL("DROP TRIGGER {} ON durably_runs").format(sql.Identifier(name)))
    return is_on if on is None else on
