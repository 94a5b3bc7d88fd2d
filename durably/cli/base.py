"""What every `durably` command shares: the command group, the --app/--store/--by options,
finding the app and its store, and the one-line errors of `main`."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import click

from durably.app import App
from durably.client.client import Client
from durably.core.attributes import attributes_of
from durably.core.audit import Via
from durably.durations import parse_duration
from durably.errors import ConfigError, DurablyError, PayloadError
from durably.observability import logs
from durably.stores import DEFAULT_URL, Store, open_store
from durably.views.commands import durably_command

__all__ = [
    "BY",
    "DURATION",
    "PRECEDENCE",
    "SINCE",
    "attributes_option",
    "cli",
    "client_for",
    "fail",
    "json_arguments",
    "load_app",
    "main",
    "store_for",
    "where",
    "worker_hint",
]

F = TypeVar("F", bound=Callable[..., Any])

PRECEDENCE = (
    "Which store: --store, else the store of --app, else $DURABLY_STORE, else "
    "sqlite:///durably.db. sqlite:///relative.db is relative to the current directory, "
    "sqlite:////abs/path.db absolute."
)


def where(command: F) -> F:
    """The --app and --store options every store command takes."""
    command = click.option(
        "--store",
        "store_url",
        default=None,
        metavar="URL",
        help="The store's URL (overrides --app's).",
    )(command)
    return click.option(
        "--app",
        "app_target",
        default=None,
        metavar="MODULE:ATTR",
        help="Your durably.App (imported with the current directory on the import path): "
        "its store, and its workflows' and steps' types.",
    )(command)


class DurationType(click.ParamType):  # type: ignore[type-arg]
    """A duration option (30s, 5m, 1h, 2d): a usage error, not a traceback, when it is not one."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_duration(value, what=param.name if param else "duration")
        except (ValueError, TypeError, DurablyError) as exc:
            self.fail(f"{value!r} is not a duration like 30s, 5m, 1h or 2d ({exc})", param, ctx)


DURATION = DurationType()


class MomentType(click.ParamType):  # type: ignore[type-arg]
    """A time option, ISO 8601 (2026-11-27, 2026-11-27T10:00, ...+02:00); UTC unless it says
    otherwise."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a time like 2026-11-27 or 2026-11-27T10:00", param, ctx)
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


MOMENT = MomentType()


class SinceType(click.ParamType):  # type: ignore[type-arg]
    """A time, or a duration back from now (1h: the last hour): a timedelta or a datetime."""

    name = "duration_or_time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (datetime, timedelta)):
            return value
        try:
            return parse_duration(str(value), what="since")
        except (ValueError, TypeError, DurablyError):
            pass
        try:
            return MOMENT.convert(value, param, ctx)
        except click.BadParameter:
            self.fail(
                f"{value!r} is neither a duration back from now (30m, 1h, 7d) nor a time "
                "(2026-11-27, 2026-11-27T10:00)",
                param,
                ctx,
            )


SINCE = SinceType()

BY = click.option(
    "--by", default=lambda: os.environ.get("USER", "cli"), help="Who acts (recorded)."
)


def attributes_option(help: str) -> Callable[[F], F]:
    """The repeatable --attr NAME=VALUE option, given to the command as a dict (None if
    not given); a text without '=' (or ':'), or a name given twice, is a usage error."""

    def parse(
        ctx: click.Context, param: click.Parameter, given: tuple[str, ...]
    ) -> dict[str, str] | None:
        try:
            return attributes_of(given, "--attr") if given else None
        except PayloadError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return click.option(
        "--attr", "attributes", multiple=True, metavar="NAME=VALUE", callback=parse, help=help
    )


@click.group(epilog=PRECEDENCE)
@click.option("-v", "--verbose", is_flag=True, help="Log debug details.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object a line, with the run's id, workflow, correlation id, step "
    "and attempt.",
)
def cli(verbose: bool, log_format: str) -> None:
    """durably: durable workflows for Python."""
    logs.configure(
        json_lines=log_format == "json", level=logging.DEBUG if verbose else logging.INFO
    )


def _debug(ctx: click.Context, param: click.Parameter, verbose: bool) -> None:
    if verbose:
        logging.getLogger().setLevel(logging.DEBUG)


# `-v` after a long-running command too (`durably worker shop:app -v`), as people type it
VERBOSE = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    expose_value=False,
    callback=_debug,
    help="Log debug details (as `durably -v COMMAND`).",
)


# -- finding the app and the store ----------------------------------------------------------


@contextlib.contextmanager
def client_for(
    app_target: str | None, store_url: str | None, *, create: bool = False
) -> Iterator[Client]:
    """The client on the store the options name, knowing the app if --app was given.

    Without `create`, a store that does not exist is an error naming where durably looked
    and why there, rather than a new empty store that shows nothing."""
    app = None if app_target is None else load_app(app_target)
    where, source = store_for(app, app_target, store_url)
    if isinstance(where, str):
        try:
            store = open_store(where, create=create)
        except ConfigError as exc:
            raise ConfigError(f"{exc} ({source})") from None  # the URL may hold a password
    else:
        store = where
    try:
        clock = None if app is None else app.clock
        yield Client(store, registry=app, clock=clock, via=Via.CLI)
    finally:
        store.close()


def store_for(
    app: App | None, app_target: str | None, store_url: str | None
) -> tuple[str | Store, str]:
    """The store to open (or the app's open Store), and where that choice came from."""
    if store_url:
        return store_url, "the URL came from --store"
    if app is not None:
        return app.store_url or app.store, f"the URL is that of the store of --app {app_target}"
    from_environment = os.environ.get("DURABLY_STORE")
    if from_environment:
        return from_environment, "the URL came from $DURABLY_STORE"
    return DEFAULT_URL, (
        f"{DEFAULT_URL} is the default, as no --store, --app or $DURABLY_STORE was given: "
        "pass --app module:attr to use your app's store"
    )


def worker_hint(app_target: str | None, client: Client, purpose: str) -> None:
    """After an action hands a run to the workers: if none is live, the command that starts
    one (said once, not after every action while workers run)."""
    now = client.clock.now()
    if any(worker.alive(now) for worker in client.workers()):
        return
    target = shlex.quote(app_target) if app_target else "MODULE:ATTR"
    command = f"{durably_command()} worker {target} --store {shlex.quote(client.store.url)}"
    click.echo(f"no worker is live; one must run {purpose}: {command}")


def load_app(target: str) -> App:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{target!r} is not MODULE:ATTRIBUTE (e.g. myapp.workflows:app)")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{target!r} is not a durably.App (found {type(app).__name__})")
    return app


def main() -> None:
    """The console script: every error is one line `error: ...` (1: refused, 2: usage)."""
    try:
        status = cli.main(standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # `durably`, `durably runs`: the help
        click.echo(exc.format_message(), err=True)
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        if exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
            click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)
        fail(exc.format_message(), exc.exit_code)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        fail("aborted", 1)
    except DurablyError as exc:
        fail(str(exc), 1)
    sys.exit(status if isinstance(status, int) else 0)


def json_arguments(texts: Sequence[str], what: str) -> list[object]:
    """Arguments a person typed, each one JSON value (`3`, `'"text"'`, `'{"a": 1}'`), for
    `what` ("the query", "the update"); PayloadError naming the one that is not JSON."""
    values = []
    for number, text in enumerate(texts, start=1):
        try:
            values.append(json.loads(text))
        except ValueError as exc:
            raise PayloadError(
                f"argument {number} of {what} ({text!r}) is not JSON: {exc}; quote a string "
                """as JSON, e.g. '"text"'"""
            ) from None
    return values


def fail(message: str, code: int) -> NoReturn:
    one_line = " ".join(line.strip() for line in message.splitlines() if line.strip())
    click.echo(f"error: {one_line}", err=True)
    sys.exit(code)
