"""The SQLite wake-up directory (in the machine's shared temporary directory) is used only
if it is this user's alone: one that another user made first, or that is open to others,
could take or feed the workers' wake-ups, so it is refused (the workers poll instead) and
the log says to remove it."""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from durably.stores.sqlite.wakeups import LocalWakeups


@pytest.fixture
def wakeups(tmp_path: Path) -> Iterator[LocalWakeups]:
    found = LocalWakeups(tmp_path / "durably.db")
    yield found
    shutil.rmtree(found.directory, ignore_errors=True)


def test_a_directory_open_to_others_is_refused(
    wakeups: LocalWakeups, caplog: pytest.LogCaptureFixture
) -> None:
    wakeups.directory.mkdir()
    os.chmod(wakeups.directory, 0o777)  # as another user could have left it
    spy = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # someone listening in it
    spy.bind(str(wakeups.directory / "spy"))
    spy.setblocking(False)

    with caplog.at_level(logging.WARNING):
        stop = wakeups.watch(lambda message: None)
    wakeups.notify()

    assert "is open to other users (mode 777): remove it" in caplog.text
    assert os.listdir(wakeups.directory) == ["spy"]  # no worker's socket went in
    with pytest.raises(BlockingIOError):
        spy.recv(16)  # and nothing was sent to it
    stop()
    spy.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_another_user_owns_is_refused(
    wakeups: LocalWakeups, caplog: pytest.LogCaptureFixture
) -> None:
    wakeups.directory.mkdir(mode=0o700)
    os.chown(wakeups.directory, 65534, 65534)  # nobody's

    with caplog.at_level(logging.WARNING):
        stop = wakeups.watch(lambda message: None)

    assert "is owned by another user (uid 65534): remove it" in caplog.text
    assert os.listdir(wakeups.directory) == []
    stop()


def test_a_directory_of_this_users_alone_is_used(wakeups: LocalWakeups) -> None:
    heard: list[bytes] = []
    stop = wakeups.watch(heard.append)
    try:
        assert oct(wakeups.directory.stat().st_mode & 0o777) == "0o700"
        assert len(os.listdir(wakeups.directory)) == 1  # this watcher's socket
    finally:
        stop()
