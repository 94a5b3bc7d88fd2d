"""Who is locked out for guessing tokens: the server counts each client address's failed
attempts (a dashboard login with a token it does not know, an API request bearing one) over
a sliding window; an address that failed `failures` times within `window` is locked out
until the oldest of those failures leaves the window. The server asks before it looks at the
token, so a locked-out address learns nothing more and costs the server nothing.

A success does not clear an address's failures: an attacker who also holds a token of their
own (or shares an address with someone who does) could otherwise guess without bound.

Written here rather than taken from the `limits` package: its in-memory storage reads the
wall clock itself and expires keys with a timer thread, where this needs the time passed in
(the server passes its app's clock, which tests fake) and a plain bound on how many addresses
it remembers. An attacker rotating addresses cannot grow it past `most_addresses`: the address
whose last failure is the oldest is forgotten first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from datetime import datetime, timedelta

__all__ = ["DEFAULT_FAILURES", "DEFAULT_WINDOW", "Lockouts"]

DEFAULT_FAILURES = 10
DEFAULT_WINDOW = timedelta(minutes=1)
_MOST_ADDRESSES = 10_000  # at most `failures` instants each: a few megabytes at worst


class Lockouts:
    """Failed token attempts by client address, over a sliding window."""

    def __init__(
        self,
        *,
        failures: int = DEFAULT_FAILURES,
        window: timedelta = DEFAULT_WINDOW,
        most_addresses: int = _MOST_ADDRESSES,
    ) -> None:
        if failures < 1:
            raise ValueError(f"the failures allowed must be at least 1, not {failures}")
        if window <= timedelta(0):
            raise ValueError(f"the window must be longer than nothing (say 1m), not {window}")
        self.failures = failures
        self.window = window
        self._most = most_addresses
        self._failed: OrderedDict[str, deque[datetime]] = OrderedDict()  # oldest failer first
        self._lock = threading.Lock()  # the server's sync routes run on a pool of threads

    def locked(self, address: str, now: datetime) -> timedelta | None:
        """How long `address` must wait before it may try a token again; None: it may now."""
        with self._lock:
            recent = self._recent(address, now)
            if recent is None or len(recent) < self.failures:
                return None
            return min(recent[0] + self.window - now, self.window)

    def failed(self, address: str, now: datetime) -> bool:
        """Count a failed attempt of `address`; whether it is the one that locked it out (the
        server logs that, once per lockout)."""
        with self._lock:
            recent = self._recent(address, now)
            if recent is None:
                recent = self._failed[address] = deque(maxlen=self.failures)
            before = len(recent)
            recent.append(now)
            self._failed.move_to_end(address)
            while len(self._failed) > self._most:
                self._failed.popitem(last=False)
            return before == self.failures - 1  # not again for attempts already under way

    @property
    def remembered(self) -> int:
        """How many addresses it remembers failures of."""
        return len(self._failed)

    def _recent(self, address: str, now: datetime) -> deque[datetime] | None:
        """The address's failures still within the window (None: none; it is forgotten)."""
        recent = self._failed.get(address)
        if recent is None:
            return None
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        if not recent:
            del self._failed[address]
            return None
        return recent
