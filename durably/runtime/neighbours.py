"""Workers on one machine see each other die in seconds. A worker's default name says where
it runs (`host:pid:tag`); a worker that finds, among the workers of its store, one named for
this host whose process is gone (SIGKILLed, crashed, its machine's OOM killer) ends that
worker's leases at once, so that its runs are taken over now rather than when their leases
expire. Across machines, and for workers given a name of their own, the lease decides.

A process id can be reused: a dead worker's id taken by another process makes it look alive,
and its runs then wait for their leases as before, never the other way round.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

__all__ = ["default_name", "gone_here"]

_TAG = 6  # hex digits after the process id: two workers of one process differ


def default_name() -> str:
    """The name of a worker that is given none: its host, its process id and a tag."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:_TAG]}"


def gone_here(name: str) -> bool:
    """Whether `name` is the default name of a worker on this host whose process is gone."""
    parts = name.rsplit(":", 2)
    if len(parts) != 3:
        return False
    host, pid, tag = parts
    if host != socket.gethostname() or not pid.isdigit() or len(tag) != _TAG:
        return False
    return _process_gone(int(pid))


def _process_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, as another user's
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has exited but not been reaped by its parent yet (Linux's /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"  # the state follows the command's name
