"""The pauses of a SQLite writer waiting for the write lock (durably.stores.sqlite.connections):
short from the first try, never longer than 1.5 ms however long it waits, and
drawn apart so that writers do not try in step. SQLite's own busy handler pauses up to 100 ms,
which lets a busy writer take the lock again and again meanwhile."""

from __future__ import annotations

import itertools
import random

from durably.stores.sqlite.connections import write_lock_pauses


def test_the_first_pause_is_a_fraction_of_a_millisecond() -> None:
    first = next(write_lock_pauses(random.Random(1)))

    assert 0.0001 <= first <= 0.0003


def test_no_pause_is_longer_than_a_millisecond_and_a_half_however_long_the_wait() -> None:
    pauses = list(itertools.islice(write_lock_pauses(random.Random(2)), 10_000))

    assert max(pauses) <= 0.0015
    assert min(pauses[10:]) >= 0.0005  # after a few doublings: between 0.5 and 1.5 ms


def test_a_writer_tries_at_least_sixty_times_in_its_first_hundred_milliseconds() -> None:
    waited, tries = 0.0, 0
    for pause in write_lock_pauses(random.Random(3)):
        if waited + pause > 0.1:
            break
        waited += pause
        tries += 1

    assert tries >= 60  # SQLite's busy handler: 12 tries in its first 283 ms


def test_the_pauses_of_two_writers_differ() -> None:
    one = list(itertools.islice(write_lock_pauses(random.Random(4)), 20))
    other = list(itertools.islice(write_lock_pauses(random.Random(5)), 20))

    assert all(a != b for a, b in zip(one, other, strict=True))
