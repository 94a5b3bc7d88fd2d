"""A TCP proxy on 127.0.0.1 that injects network faults between durably and its PostgreSQL
server: latency, connections reset at random, answers lost after the server acted on a
statement (an ambiguous commit: it committed, the client never hears so), and a cut (a
partition: nothing passes, connections hang) that can heal.

Written for the tests rather than taken from a library: toxiproxy (the usual tool) is a Go
server with no package on PyPI or Debian, and what is needed here is ~150 lines of sockets,
plus one PostgreSQL-aware fault: losing the answer to a statement the server received.

Only loopback addresses: it listens on 127.0.0.1 and forwards to the target it is given,
which the tests take from their own PostgreSQL URL (127.0.0.1).
"""

from __future__ import annotations

import random
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FaultProxy", "Faults"]

_CHUNK = 65536
# The first byte of a frontend message that runs a statement: a simple Query, or Parse (the
# extended protocol, which psycopg uses for statements with parameters).
_STATEMENTS = (ord("Q"), ord("P"))


@dataclass(slots=True)
class Faults:
    """What the proxy does, changeable while it runs (each a probability per message, or
    seconds). `cut`: forward nothing, in either direction, until healed."""

    latency: tuple[float, float] = (0.0, 0.0)  # seconds, uniform, added to each chunk
    reset: float = 0.0  # per chunk: close both sides at once (a reset)
    lose_answer: float = 0.0  # per statement sent: forward it, swallow its answer, close
    cut: bool = False


@dataclass(slots=True)
class Counts:
    """What the proxy really did: a test checks that its faults happened."""

    connections: int = 0
    resets: int = 0
    lost_answers: int = 0
    statements: int = 0
    cut_chunks: int = 0
    errors: list[str] = field(default_factory=list)


class FaultProxy:
    def __init__(self, target_url: str, *, seed: int) -> None:
        parts = urlsplit(target_url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 5432
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the fault proxy forwards to loopback only, not {host}")
        self._target = (host, port)
        self._parts = parts
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.faults = Faults()
        self.counts = Counts()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._closed = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        """The target URL, with the proxy's address in place of the server's."""
        netloc = self._parts.netloc.rsplit("@", 1)
        where = f"127.0.0.1:{self.port}"
        netloc_out = f"{netloc[0]}@{where}" if len(netloc) == 2 else where
        return urlunsplit(self._parts._replace(netloc=netloc_out))

    def start(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            _shut(sock)
        self._acceptor.join(timeout=5)

    def cut(self) -> None:
        """A partition: from now on nothing passes (connections stay open and hang)."""
        self.faults.cut = True

    def heal(self) -> None:
        """The partition heals: the connections cut are reset (as a router's timeout would),
        and new ones pass."""
        with self._lock:
            sockets = list(self._open)
        self.faults.cut = False
        for sock in sockets:
            _shut(sock)

    # -- the plumbing ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=10)
            except OSError as exc:
                self.counts.errors.append(f"connect: {exc}")
                _shut(client)
                continue
            server.settimeout(None)
            with self._lock:
                self.counts.connections += 1
                self._open.update((client, server))
            lost = threading.Event()  # set: swallow the server's next answer, then reset
            for source, sink, upstream in ((client, server, True), (server, client, False)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink, upstream, lost), daemon=True
                )
                pump.start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, upstream: bool, lost: threading.Event
    ) -> None:
        try:
            while True:
                chunk = source.recv(_CHUNK)
                if not chunk:
                    break
                if self._dropped():
                    continue
                low, high = self.faults.latency
                if high > 0:
                    time.sleep(self._draw(low, high))
                if self._chance(self.faults.reset):
                    self.counts.resets += 1
                    break
                if not upstream and lost.is_set():
                    self.counts.lost_answers += 1  # the server acted; the client never hears
                    break
                sink.sendall(chunk)
                if upstream and chunk[0] in _STATEMENTS:
                    self.counts.statements += 1
                    if self._chance(self.faults.lose_answer):
                        lost.set()
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _shut(sock)
                with self._lock:
                    self._open.discard(sock)

    def _dropped(self) -> bool:
        """While cut, a chunk goes nowhere (and the sender hears nothing)."""
        if not self.faults.cut:
            return False
        self.counts.cut_chunks += 1
        return True

    def _chance(self, probability: float) -> bool:
        if probability <= 0:
            return False
        with self._lock:
            return self._rng.random() < probability

    def _draw(self, low: float, high: float) -> float:
        with self._lock:
            return self._rng.uniform(low, high)


def _shut(sock: socket.socket) -> None:
    """End the connection now: shutdown() wakes the pump blocked in recv() on it in the
    other thread (a close() alone would wait for that call, and the peer would hang)."""
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()
