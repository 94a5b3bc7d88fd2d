"""A network namespace of a test's own, joined to this one by a veth pair, to cut a worker off
from its database and heal the cut again: a real partition (packets dropped both ways; TCP
connections stall, then resume or reset), not a process stopped.

The addresses are the test's own, on the veth it makes: HOST_IP on this side, NS_IP in the
namespace; nothing else is reached. Needs root (ip netns); CI runs as root. Elsewhere the
fixture skips, saying why.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import unavailable

__all__ = ["HOST_IP", "NETWORK", "NS_IP", "Partition", "partition"]

NETWORK = "10.213.0.0/30"
HOST_IP = "10.213.0.1"
NS_IP = "10.213.0.2"


class Partition:
    def __init__(self) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.name = f"durably-{suffix}"
        self._here, self._there = f"dh{suffix}", f"dn{suffix}"  # 15 characters at most
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self._here, "type", "veth", "peer", "name", self._there)
            _ip("link", "set", self._there, "netns", self.name)
            _ip("addr", "add", f"{HOST_IP}/30", "dev", self._here)
            _ip("link", "set", self._here, "up")
            self._inside("addr", "add", f"{NS_IP}/30", "dev", self._there)
            self._inside("link", "set", self._there, "up")
            self._inside("link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise

    @property
    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a process inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    def cut(self) -> None:
        """Nothing passes either way (the link is down); connections stall."""
        _ip("link", "set", self._here, "down")

    def heal(self) -> None:
        _ip("link", "set", self._here, "up")

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self._here], capture_output=True, check=False)

    def _inside(self, *args: str) -> None:
        _ip("netns", "exec", self.name, "ip", *args)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, text=True, check=True, timeout=30)


@pytest.fixture
def partition() -> Iterator[Partition]:
    try:
        made = Partition()
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", "") or ""
        why = f"cannot make a network namespace here ({stderr.strip() or exc}); it needs root"
        unavailable(why, "the partition test (it runs as root there)")
    try:
        yield made
    finally:
        made.remove()
