"""`durably keys`: the keys that encrypt payloads at rest (durably.codec.encryption): make a
new one, and rotate a store onto the current one."""

from __future__ import annotations

import click

from durably.cli.base import PRECEDENCE, cli, client_for, where
from durably.codec.encryption import KEYS_ENV, KEYS_FILE_ENV, new_key
from durably.errors import ConfigError
from durably.stores.encrypted import EncryptedStore

__all__ = ["keys"]


@cli.group()
def keys() -> None:
    """Keys that encrypt payloads at rest: inputs, results, signals' data, approvals' details.

    Processes read their keys from $DURABLY_KEYS ("k2:BASE64,k1:BASE64") or from the file
    $DURABLY_KEYS_FILE names (one "k2 BASE64" per line); the first key encrypts new values,
    each key listed decrypts what it encrypted. See docs/how-to/encryption.md."""


@keys.command("new")
@click.argument("key_id", default="k1")
def keys_new(key_id: str) -> None:
    """Print a new random key (32 bytes, base64) as KEY_ID:KEY, for $DURABLY_KEYS.

    Put it first in the list to encrypt new values with it, keep the older keys after it,
    then run `durably keys rotate`."""
    click.echo(f"{key_id}:{new_key()}")


@keys.command("rotate", epilog=PRECEDENCE)
@where
@click.option(
    "--batch",
    default=500,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Rows rewritten in one transaction.",
)
def keys_rotate(app_target: str | None, store_url: str | None, batch: int) -> None:
    """Encrypt every stored payload with the current key (the first of $DURABLY_KEYS).

    Values encrypted with an older key, and values stored before encryption was turned on,
    are rewritten a batch at a time; workers may go on meanwhile (a row that changed since it
    was read is left for the next rotation). Every key that encrypted a value must be given.
    Safe to stop and run again: it goes on where values are still old."""
    with client_for(app_target, store_url) as client:
        store = client.store
        if not isinstance(store, EncryptedStore):
            raise ConfigError(
                f"no keys are given: set {KEYS_ENV} or {KEYS_FILE_ENV}, the new key first "
                "(`durably keys new k2`), then run this again"
            )
        total = store.payload_rows()
        with click.progressbar(
            length=total, label=f"sealing with key {store.keys.current}", show_pos=True
        ) as bar:
            for read in store.rotate(batch=batch):
                bar.update(read)
        click.echo(f"{total:,} rows read; every payload is now sealed with {store.keys.current}")
