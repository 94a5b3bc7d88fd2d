"""`durably ARGS` run as the console script runs it, for tests of its statuses and errors."""

from __future__ import annotations

import sys
from unittest import mock

import pytest
from click.testing import CliRunner

from durably.cli import main


def run_durably(*args: str) -> tuple[int | str | None, str]:
    """`durably ARGS` as the console script runs it, in CliRunner's isolation: its status and
    stderr. The script is durably.cli:main, the `cli` group behind the one-line errors and
    their statuses (CliRunner.invoke(cli) would show click's own, as a standalone group)."""
    with (
        CliRunner().isolation() as (_, err, _),
        mock.patch.object(sys, "argv", ["durably", *args]),
        pytest.raises(SystemExit) as exited,
    ):
        main()
    return exited.value.code, err.getvalue().decode()
