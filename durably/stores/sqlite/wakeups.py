"""Cross-process wake-ups for the SQLite store: a run started in one process wakes the idle
workers of the others at once instead of at their next poll.

SQLite has no LISTEN/NOTIFY and no well-kept library adds one, so this is written here: each
watching worker binds a Unix datagram socket in a directory named after the database file,
and a writer sends an empty datagram to every socket there. It is best effort by design: a
datagram that is lost, or a machine without Unix sockets, only means the worker finds the run
at its next poll.

The same mechanism, on a channel of its own (a second directory), tells waiting handles that
runs ended: those datagrams carry the run ids, one per line (an empty one: any run).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["LocalWakeups", "run_messages"]

log = logging.getLogger("durably.wakeups")

_SUPPORTED = hasattr(socket, "AF_UNIX")
_LARGEST = 8192  # bytes in one datagram: well under every platform's limit
_SETTLED_NS = 100_000_000  # a directory's time this old is past any file system's tick


def run_messages(run_ids: Sequence[str]) -> list[bytes]:
    """Run ids as datagrams, one id a line, none over _LARGEST (a longer id: b"", any run)."""
    messages: list[bytes] = []
    current = b""
    for run_id in run_ids:
        line = run_id.encode()
        if len(line) >= _LARGEST:
            return [b""]
        if current and len(current) + 1 + len(line) > _LARGEST:
            messages.append(current)
            current = b""
        current = line if not current else current + b"\n" + line
    return [*messages, current] if current else messages


class LocalWakeups:
    """Wake-ups among the processes of one machine that share one database file."""

    def __init__(self, database: str | Path, channel: str = "") -> None:
        # Socket paths are limited to ~100 bytes, so the directory is short and named by a
        # hash of the database's real path rather than placed beside it.
        real = os.path.realpath(database).encode()
        digest = hashlib.sha256(real).hexdigest()[:16]
        uid = os.getuid() if hasattr(os, "getuid") else 0
        suffix = f"-{channel}" if channel else ""
        self.directory = Path(tempfile.gettempdir()) / f"durably-{uid}-{digest}{suffix}"
        self._sender: socket.socket | None = None
        self._lock = threading.Lock()
        self._seen: tuple[int, bool] = (-1, False)  # the directory's mtime, and if any listens

    def notify(self, messages: Sequence[bytes] = (b"",)) -> None:
        """Send each message to every process watching this database (without blocking;
        never raises)."""
        if not _SUPPORTED:
            return
        if _untrusted(self.directory) is not None:
            return  # nobody watches, or the directory is not this user's alone
        try:
            names = os.listdir(self.directory)
        except OSError:
            return  # nobody watches
        with self._lock:
            sender = self._sender
            if sender is None:
                sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
            for name in names:
                path = os.path.join(self.directory, name)
                for message in messages:
                    try:
                        sender.sendto(message, path)
                    except (ConnectionRefusedError, FileNotFoundError):
                        with contextlib.suppress(OSError):  # its process is gone
                            os.unlink(path)
                        break
                    except OSError:
                        break  # a full queue: its reader is behind (and polls)

    def listened(self) -> bool:
        """Whether a process of this machine watches: a stat of the directory, and a read of
        it only when it changed (a watcher came or went). Never raises."""
        try:
            changed = os.stat(self.directory).st_mtime_ns
        except OSError:
            return False
        if changed != self._seen[0]:
            try:
                listening = bool(os.listdir(self.directory))
            except OSError:
                return False
            # A file system's times may be coarse (a few ms): a change in the same tick as
            # this read would leave the time as it is, so a time that recent is read again
            settled = time.time_ns() - changed > _SETTLED_NS
            self._seen = (changed if settled else -1, listening)
        return self._seen[1]

    def watch(self, wake: Callable[[bytes], None]) -> Callable[[], None]:
        """Call `wake(message)` (from a thread of its own) on every message; returns the
        stop call."""
        if not _SUPPORTED:
            return lambda: None
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            why = _untrusted(self.directory)
            if why is not None:
                raise PermissionError(f"{self.directory} {why}")
            path = self.directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            listener.bind(str(path))
            listener.settimeout(1.0)  # looks at `stopping` at least this often
        except OSError as exc:
            log.warning("cross-process wake-ups are off (%s); workers rely on polling", exc)
            return lambda: None
        stopping = threading.Event()

        def listen() -> None:
            while not stopping.is_set():
                try:
                    message = listener.recv(_LARGEST)
                except TimeoutError:
                    continue
                except OSError:
                    return  # closed
                if not stopping.is_set():
                    wake(message)

        thread = threading.Thread(target=listen, name="durably-wakeups", daemon=True)
        thread.start()

        def stop() -> None:
            stopping.set()
            with (
                contextlib.suppress(OSError),
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as poke,
            ):
                poke.sendto(b"", str(path))  # out of recv now rather than at its timeout
            thread.join(timeout=2)
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(path)

        return stop

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None


def _untrusted(directory: Path) -> str | None:
    """Why the wake-up directory must not be used (None: it is a directory of this user's
    alone). Anybody on the machine could have made it first, in the shared temporary
    directory: owned by another user, or open to others, it could take or feed wake-ups."""
    try:
        found = directory.lstat()
    except OSError:
        return "does not exist"
    if not stat.S_ISDIR(found.st_mode):
        return "is not a directory (a link, or a file)"
    if hasattr(os, "getuid") and found.st_uid != os.getuid():
        return f"is owned by another user (uid {found.st_uid}): remove it"
    if found.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(found.st_mode):o}): remove it"
    return None
