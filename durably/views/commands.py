"""The durably command as a person can paste it into a new shell: the script of the durably
that is running, by its path (a virtualenv's bin is rarely on a new shell's PATH)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

__all__ = ["durably_command"]


def durably_command() -> str:
    """The running durably as a shell command: the `durably` script beside this Python (in a
    virtualenv's bin), else this Python with `-m durably`."""
    script = Path(sys.executable).parent / "durably"
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m durably"
