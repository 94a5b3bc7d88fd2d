"""The `durably` command (console script `durably.cli:main`)."""

from durably.cli import (  # noqa: F401  (each registers its commands)
    answers,
    audit,
    commands,
    evolve,
    keys,
    schedules,
    schema,
    serve,
    steer,
    webhooks,
)
from durably.cli.base import cli, main

__all__ = ["cli", "main"]
