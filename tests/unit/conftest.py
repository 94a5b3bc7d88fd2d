"""The unit tests' shared fixture: a `durably` command run in a test configures the root
logger (--log-format); each test leaves it as it found it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def root_logger() -> Iterator[None]:
    """Every `durably` invocation configures the root logger (--log-format): undo it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
