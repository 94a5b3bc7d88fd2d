"""`durably worker TARGET --processes N`: one command keeps N worker processes running on
this machine, so that throughput can grow with the cores without a supervisor of one's own.

Each child is a plain `durably worker` with the same options, named NAME-1 .. NAME-N. It is
started as `sys.executable -m durably worker ...` (subprocess), not through multiprocessing:
each child then is exactly the command a person would run by hand (its own interpreter,
imports, logging set up by the same command line, its options visible in `ps`), nothing is
pickled, and no interpreter state of the supervisor (an app imported, a store opened for
--upgrade, threads a user module started) is forked into it.

- SIGTERM or SIGINT to the supervisor is forwarded to every child, which stops as a worker
  stops (its runs finish or are handed back within --stop-grace). The supervisor waits for
  them, --stop-grace plus STOP_MARGIN at most, SIGKILLs what is left, and exits 0.
- A child that ends while nobody asked (killed, crashed, any exit) is logged and started again
  under its name, after a delay that grows from FIRST_DELAY to MOST_DELAY and starts over once
  a child has lived STEADY. A worker restarted under its name takes back at once the runs its
  last process held; none is lost meanwhile either way (their leases expire).
- On Linux a child gets SIGTERM if the supervisor itself dies (SIGKILL, the OOM killer), so
  that no child outlives it under a name its next incarnation will use again.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType

__all__ = [
    "FIRST_DELAY",
    "MOST_DELAY",
    "STEADY",
    "STOP_MARGIN",
    "Child",
    "Supervisor",
    "duration_text",
    "restart_delay",
]

log = logging.getLogger("durably.worker")

FIRST_DELAY = timedelta(seconds=1)  # before the first restart of a child
MOST_DELAY = timedelta(seconds=30)  # the delay doubles up to this
STEADY = timedelta(seconds=60)  # a child that lived this long is restarted after FIRST_DELAY
# After --stop-grace, what a stopping worker may still need: cancelling the runs it held,
# handing them back, saying it is gone, closing the store.
STOP_MARGIN = timedelta(seconds=10)
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def restart_delay(previous: timedelta | None, lived: timedelta) -> timedelta:
    """How long a child that ended after living `lived` waits before it starts again, given
    the delay before its last start (None: it was never restarted)."""
    if previous is None or lived >= STEADY:
        return FIRST_DELAY
    return min(previous * 2, MOST_DELAY)


def duration_text(duration: timedelta) -> str:
    """A duration as the worker's options read it back (10000ms, 200ms, 0.5ms)."""
    micro = duration // timedelta(microseconds=1)
    return f"{micro // 1000}ms" if micro % 1000 == 0 else f"{micro / 1000}ms"


@dataclass(slots=True)
class Child:
    """One of the supervisor's worker processes: its name and command, the process now
    running it (None between a death and its restart), and its restarts' arithmetic."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0  # time.monotonic() of its last start
    delay: timedelta | None = None  # before its last restart
    restart_at: float | None = None  # time.monotonic() when it starts again


class Supervisor:
    """Runs `children` until SIGTERM or SIGINT; `stop_grace` is the workers' --stop-grace."""

    def __init__(self, children: Sequence[Child], *, stop_grace: timedelta) -> None:
        if not children:
            raise ValueError("a supervisor needs at least one child")
        self.children = list(children)
        self.stop_within = (stop_grace + STOP_MARGIN).total_seconds()
        self._asked: int | None = None  # the stop signal received
        self._on_death = _death_signal()

    def run(self) -> int:
        """Start every child, keep them running, stop them all on a stop signal; the exit
        status (0)."""
        wake_read, wake_write = os.pipe()  # a signal writes a byte: the loop wakes
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        previous_fd = signal.set_wakeup_fd(wake_write)
        previous = {
            signal.SIGTERM: signal.signal(signal.SIGTERM, self._stop_asked),
            signal.SIGINT: signal.signal(signal.SIGINT, self._stop_asked),
            signal.SIGCHLD: signal.signal(signal.SIGCHLD, _child_ended),  # wakes the loop
        }
        try:
            for child in self.children:
                self._start(child)
            while self._asked is None:
                self._look_after()
                if self._asked is None:
                    _wait(wake_read, self._next_restart())
            self._stop_all(wake_read)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_fd)
            os.close(wake_read)
            os.close(wake_write)
        return 0

    # -- while running ----------------------------------------------------------------------

    def _start(self, child: Child) -> None:
        child.process = subprocess.Popen(
            child.argv, stdin=subprocess.DEVNULL, preexec_fn=self._on_death
        )
        child.started, child.restart_at = time.monotonic(), None
        log.info("supervisor: worker %s runs as process %d", child.name, child.process.pid)

    def _look_after(self) -> None:
        """Reap the children that ended, and start again those whose delay is over."""
        now = time.monotonic()
        for child in self.children:
            if child.process is not None and (code := child.process.poll()) is not None:
                lived = timedelta(seconds=now - child.started)
                child.delay = restart_delay(child.delay, lived)
                child.restart_at, child.process = now + child.delay.total_seconds(), None
                log.error(
                    "supervisor: worker %s %s after %.1fs; starting it again in %gs",
                    *(child.name, _how(code), lived.total_seconds()),
                    child.delay.total_seconds(),
                )
            if child.process is None and child.restart_at is not None and now >= child.restart_at:
                self._start(child)

    def _next_restart(self) -> float | None:
        """Seconds until the next child is due to start again (None: none waits)."""
        due = [child.restart_at for child in self.children if child.restart_at is not None]
        return None if not due else max(0.0, min(due) - time.monotonic())

    def _stop_asked(self, signum: int, frame: FrameType | None) -> None:
        self._asked = signum

    # -- stopping ---------------------------------------------------------------------------

    def _stop_all(self, wake_read: int) -> None:
        """Forward the stop to every child, wait for them (--stop-grace plus the margin), then
        SIGKILL those still running."""
        assert self._asked is not None
        running = [child for child in self.children if child.process is not None]
        name = signal.Signals(self._asked).name
        log.info("supervisor: %s received; stopping %d worker(s)", name, len(running))
        for child in running:
            assert child.process is not None
            child.process.send_signal(self._asked)  # none if it ended
        deadline = time.monotonic() + self.stop_within
        while any(child.process.poll() is None for child in running if child.process):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _wait(wake_read, left)
        for child in running:
            assert child.process is not None
            if child.process.poll() is None:
                log.warning(
                    "supervisor: worker %s still ran %gs after %s; killing it (SIGKILL)",
                    *(child.name, self.stop_within, name),
                )
                child.process.kill()
            code = child.process.wait()
            if code != 0:
                log.warning("supervisor: worker %s %s while stopping", child.name, _how(code))
        log.info("supervisor: every worker stopped")


def _how(code: int) -> str:
    """How a child's process ended, from its exit status."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return "exited by itself (status 0)" if code == 0 else f"exited with status {code}"


def _wait(wake_read: int, timeout: float | None) -> None:
    """Until a signal arrives (a stop, a child's end) or `timeout` seconds pass."""
    select.select([wake_read], [], [], timeout)
    with contextlib.suppress(BlockingIOError):  # drained
        while os.read(wake_read, 512):
            pass


def _child_ended(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD: the byte the signal writes wakes the loop, which reaps the child."""


def _death_signal() -> Callable[[], None] | None:
    """What a child runs between fork and exec (Linux): SIGTERM to it when the supervisor
    dies, and an exit at once if the supervisor died already. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def on_death() -> None:
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM))
        if os.getppid() != parent:
            os._exit(1)

    return on_death
