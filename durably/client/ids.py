"""Run ids that sort by creation time.

A random id (uuid4) puts each new run, and its events, at a random place in the stores'
indexes: once a store holds many runs (sleeping ones, finished ones), every commit then
touches as many index pages as it has runs, and slows down as the store grows. An id that
begins with the time puts new runs side by side at the end of the index, so a commit costs
the same in a store of a thousand runs or a million.

Hand-written because Python's uuid module has UUIDv7 only from 3.14: the layout is
RFC 9562's UUIDv7 (48 bits of Unix milliseconds, version and variant bits, 74 random bits),
as 32 hex digits like uuid4().hex.
"""

from __future__ import annotations

import os
import time

__all__ = ["new_run_id"]


def new_run_id() -> str:
    """A new UUIDv7 as 32 hex digits: unique, unguessable in its last 74 bits, and in
    creation order to the millisecond."""
    millis = time.time_ns() // 1_000_000
    random = int.from_bytes(os.urandom(10), "big")
    value = (millis & (1 << 48) - 1) << 80 | random
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 9562 variant
    return f"{value:032x}"
