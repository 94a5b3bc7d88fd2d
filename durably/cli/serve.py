"""`durably server` (and its alias `durably ui`): the HTTP API, the dashboard and /metrics for
an app; `durably token new`: a token for them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from durably.cli.base import DURATION, VERBOSE, cli, load_app
from durably.errors import DurablyError
from durably.stores import open_store

if TYPE_CHECKING:  # the web extra may be missing: the server says so when it starts
    from durably.web.access import PayloadsFor

__all__ = ["server", "token"]


def _server(
    target: str,
    store_url: str | None,
    read_store_url: str | None,
    host: str,
    port: int,
    tokens_file: str | None,
    open_reads: bool,
    max_body: int,
    payloads_for: PayloadsFor,
    lockout_failures: int,
    lockout_window: timedelta,
    forwarded_allow_ips: str | None,
) -> None:
    try:
        from durably.web.auth import Tokens
        from durably.web.lockouts import Lockouts
        from durably.web.server import create_app, serve
    except ImportError as exc:
        raise click.ClickException(
            f"the server needs the web extra ({exc}): pip install 'durably[web]'"
        ) from None
    try:
        lockouts = Lockouts(failures=lockout_failures, window=lockout_window)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lockout-window") from None
    app = load_app(target)
    if store_url:
        app.use_store(store_url)
    tokens = Tokens.load(tokens_file)
    if not tokens:
        click.echo(_NO_TOKENS, err=True)
    # A replica's schema is its primary's: opened as it is, never migrated.
    reads = None if read_store_url is None else open_store(read_store_url, create=False)
    click.echo(
        f"durably server for {target} on http://{host}:{port} (dashboard /, API /api, "
        f"schema /api/openapi.json, metrics /metrics), store {app.store.url}"
        + ("" if reads is None else f", reads from {reads.url}")
    )
    web = create_app(
        app,
        tokens=tokens,
        open_reads=open_reads,
        max_body=max_body,
        payloads_for=payloads_for,
        lockouts=lockouts,
        reads=reads,
    )
    try:
        serve(web, host=host, port=port, forwarded_allow_ips=forwarded_allow_ips)
    finally:
        if reads is not None:
            reads.close()


_NO_TOKENS = (
    "warning: no token is configured (--tokens-file or $DURABLY_API_TOKENS): every action is "
    "refused; make one with `durably token new NAME`"
)


def _options(command: click.Command) -> click.Command:
    for option in reversed(
        [
            click.argument("target"),
            click.option(
                "--store", "store_url", default=None, metavar="URL", help="Overrides the app's."
            ),
            click.option(
                "--read-store",
                "read_store_url",
                default=None,
                metavar="URL",
                help="A replica of the store (a PostgreSQL hot standby) to read from: GET "
                "requests, the charts and /metrics; actions, logins and waits still go to the "
                "store. Never migrated. Reads there lag by the replica's replay lag.",
            ),
            click.option(
                "--host",
                default="127.0.0.1",
                show_default=True,
                help="The address to listen on (0.0.0.0: every interface).",
            ),
            click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535)),
            click.option(
                "--tokens-file",
                default=None,
                metavar="PATH",
                help="Lines `NAME ROLE sha256:HEX` (durably token new); default: "
                "$DURABLY_API_TOKENS.",
            ),
            click.option(
                "--open-reads",
                is_flag=True,
                help="Let anybody read (runs, history, lists) without a token; acting "
                "still needs one.",
            ),
            click.option(
                "--max-body",
                default=1 << 20,
                show_default=True,
                type=click.IntRange(min=1),
                metavar="BYTES",
                help="The most bytes a request's body may take (413 beyond, before it is read).",
            ),
            click.option(
                "--payloads-for",
                type=click.Choice(["write", "read", "none"]),
                default="write",
                show_default=True,
                help="Who sees payloads encrypted at rest ($DURABLY_KEYS): tokens of the write "
                "role, of either role, or nobody; the others see `encrypted (key k2)`.",
            ),
            click.option(
                "--lockout-failures",
                default=10,
                show_default=True,
                type=click.IntRange(min=1),
                metavar="N",
                help="Unknown tokens (dashboard logins, API requests) an address may try "
                "within --lockout-window; past them its attempts are answered 429 until the "
                "oldest is that old.",
            ),
            click.option(
                "--lockout-window",
                default="1m",
                show_default=True,
                type=DURATION,
                metavar="DURATION",
                help="The sliding window of --lockout-failures (e.g. 1m, 90s, 1h).",
            ),
            click.option(
                "--forwarded-allow-ips",
                default=None,
                metavar="ADDRESSES",
                help="The proxies (comma-separated addresses, or *) whose X-Forwarded-For and "
                "X-Forwarded-Proto the server believes: the client address they give is the "
                "one locked out. Default: $FORWARDED_ALLOW_IPS, else 127.0.0.1.",
            ),
            VERBOSE,
        ]
    ):
        command = option(command)
    return command


def _make(name: str, doc: str) -> click.Command:
    def command(**options: object) -> None:
        _server(**options)  # type: ignore[arg-type]

    command.__doc__ = doc
    return click.command(name)(_options(command))  # type: ignore[arg-type]


server = _make(
    "server",
    "Serve the HTTP API (/api), the dashboard (/) and metrics (/metrics) for the app at "
    "TARGET (module:attribute), until SIGTERM or Ctrl-C. Needs durably[web].",
)
cli.add_command(server)
cli.add_command(_make("ui", "The same as `durably server`: the dashboard is at /."))


@cli.group()
def token() -> None:
    """Tokens for `durably server`: the server keeps only their hashes."""


@token.command("new")
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(["write", "read"]),
    default="write",
    show_default=True,
    help="write: read and act; read: look only.",
)
def token_new(name: str, role: str) -> None:
    """Make a token for NAME (who acts, as recorded in runs' histories): prints the token
    once, and the line to add to the server's --tokens-file or $DURABLY_API_TOKENS."""
    from durably.web.auth import NAME, hash_token, new_token

    if not NAME.fullmatch(name):
        raise click.BadParameter("letters, digits and _ . @ - only, at most 64", param_hint="NAME")
    made = new_token()
    click.echo(f"token (give it to {name}; it is not shown again): {made}")
    click.echo(f"line for the server's tokens: {name} {role} {hash_token(made)}")


@token.command("revoke")
@click.argument("name")
@click.option(
    "--tokens-file",
    required=True,
    metavar="PATH",
    help="The tokens file the server reads (--tokens-file of durably server).",
)
def token_revoke(name: str, tokens_file: str) -> None:
    """Take NAME's token out of the tokens file: a running server refuses it (and ends the
    sessions made with it) from its next request on, without a restart."""
    from durably.web.auth import remove_token

    if not remove_token(Path(tokens_file), name):
        raise DurablyError(f"the tokens file {tokens_file} has no token named {name!r}")
    click.echo(f"revoked the token of {name}: a running server refuses it from its next request")
