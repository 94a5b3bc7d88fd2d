"""The `durably` command (console script `durably.cli:main`)."""

from durably.cli import (  # noqa: F401  (each registers its commands)
    answers,
    audit,
    commands,
    evolve,
    keys,
    published,
    queries,
    schedules,
    schema,
    serve,
    steer,
    updates,
    webhooks,
)
from durably.cli.base import cli, main

__all__ = ["cli", "main"]
