"""`durably migrate`: create a store's schema or bring it up to date, as a role that may
change it, so that the workers, the server and the commands may run as one that may not."""

from __future__ import annotations

import click

from durably.cli.base import PRECEDENCE, cli, load_app, store_for, where
from durably.errors import ConfigError
from durably.stores import Migration, migrate_store, open_store
from durably.stores.sql.schema import LATEST_VERSION

__all__ = ["migrate"]


@cli.command(epilog=PRECEDENCE)
@where
@click.option(
    "--check",
    is_flag=True,
    help="Change nothing: exit 0 if the schema is current, 1 if it is missing or needs "
    "migrating (for deploy pipelines).",
)
def migrate(app_target: str | None, store_url: str | None, check: bool) -> None:
    """Create the store's schema, or migrate it to this durably's version; say what it did.
    Run it as the database's owner before workers, servers and commands that run as a role
    that may only read and write rows ($DURABLY_MIGRATE=never)."""
    url, source = _url(app_target, store_url)
    try:
        if check:
            click.echo(_checked(url))
        else:
            click.echo(_said(migrate_store(url)))
    except ConfigError as exc:
        raise ConfigError(f"{exc} ({source})") from None  # the URL may hold a password


def _url(app_target: str | None, store_url: str | None) -> tuple[str, str]:
    """The URL of the store the options name, and where it came from."""
    app = None if app_target is None else load_app(app_target)
    where, source = store_for(app, app_target, store_url)
    if not isinstance(where, str):
        raise click.UsageError(
            f"the app {app_target} was given a store object, not a URL: pass --store URL"
        )
    return where, source


def _checked(url: str) -> str:
    """What --check says of a current schema; a missing or older one is refused by opening it."""
    store = open_store(url, create=False)
    store.close()
    return f"the durably schema in {store.url} is at version {LATEST_VERSION}: current"


def _said(done: Migration) -> str:
    if done.found == done.now:
        return f"the durably schema in {done.url} is at version {done.now} already: nothing to do"
    if done.found == 0:
        return f"created the durably schema in {done.url}, at version {done.now}"
    return f"migrated the durably schema in {done.url} from version {done.found} to {done.now}"
