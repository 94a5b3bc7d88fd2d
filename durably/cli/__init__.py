"""The `durably` command (console script `durably.cli:main`)."""

from durably.cli import answers, commands, evolve, schedules, schema, serve, steer  # noqa: F401  (each registers its commands)
from durably.cli.base import cli, main

__all__ = ["cli", "main"]
