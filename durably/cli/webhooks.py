"""`durably webhooks`: subscribe URLs to runs' state changes, read their deliveries and the
dead-letter list, send a dead one again; `durably listen`: print every status change as it
happens; `durably changes on|off`: PostgreSQL's change stream (docs/how-to/webhooks.md)."""

from __future__ import annotations

import os
import threading

import click

from durably.cli.base import BY, PRECEDENCE, cli, client_for, where
from durably.cli.output import AS_JSON, Column, echo_json, echo_table
from durably.core.webhooks import StatusChange, WebhookKind
from durably.views.webhooks import DeliveryOut, WebhookOut

__all__ = ["changes", "listen", "webhooks"]

_KINDS = ", ".join(kind.value for kind in WebhookKind)


@cli.group()
def webhooks() -> None:
    """Outbound webhooks: a POST to a URL when a run completes, fails, is cancelled, is
    parked for a person or paused. Delivered by the workers, at least once, signed if the
    webhook has a secret."""


@webhooks.command("add", epilog=PRECEDENCE)
@where
@click.argument("url")
@click.option("--events", required=True, metavar="KIND,...", help=f"Among: {_KINDS}.")
@click.option("--secret", default=None, help="Signs each delivery (Durably-Signature).")
@click.option(
    "--secret-env",
    default=None,
    metavar="VAR",
    help="Read the secret from this environment variable (kept out of the shell's history).",
)
@click.option("--workflow", default=None, help="Only this workflow's runs.")
@click.option(
    "--attempts",
    default=8,
    show_default=True,
    type=click.IntRange(1, 50),
    help="Attempts per delivery before it is dead.",
)
@BY
@AS_JSON
def webhooks_add(
    app_target: str | None,
    store_url: str | None,
    url: str,
    events: str,
    secret: str | None,
    secret_env: str | None,
    workflow: str | None,
    attempts: int,
    by: str,
    as_json: bool,
) -> None:
    """Subscribe URL to the kinds of change --events names."""
    if secret is not None and secret_env is not None:
        raise click.UsageError("give --secret or --secret-env, not both")
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise click.UsageError(f"--secret-env {secret_env}: that variable is not set or empty")
    with client_for(app_target, store_url) as client:
        made = client.webhooks.add(
            url, events.split(","), secret=secret, workflow=workflow, attempts=attempts, by=by
        )
    if as_json:
        echo_json(WebhookOut.of(made))
        return
    signed = "signed" if made.signed else "unsigned"
    click.echo(f"webhook {made.id} added: {', '.join(made.kinds)} -> {made.url} ({signed})")


@webhooks.command("list", epilog=PRECEDENCE)
@where
@AS_JSON
def webhooks_list(app_target: str | None, store_url: str | None, as_json: bool) -> None:
    """Every webhook: its URL, kinds, workflow, attempts, and whether a secret signs it
    (the secret itself is never shown)."""
    with client_for(app_target, store_url) as client:
        listed = client.webhooks.list()
    if as_json:
        echo_json([WebhookOut.of(hook) for hook in listed])
        return
    echo_table(
        [
            Column("ID"),
            Column("URL", max_width=50),
            Column("EVENTS", max_width=40),
            Column("WORKFLOW", max_width=24),
            Column("ATTEMPTS", justify="right"),
            Column("SECRET"),
        ],
        (
            [
                hook.id,
                hook.url,
                ",".join(hook.kinds),
                hook.workflow or "(every)",
                str(hook.attempts),
                "set" if hook.signed else "none",
            ]
            for hook in listed
        ),
    )
    if not listed:
        click.echo("(no webhook: `durably webhooks add URL --events run_failed,...`)")


@webhooks.command("remove", epilog=PRECEDENCE)
@where
@click.argument("webhook_id", metavar="ID")
@BY
def webhooks_remove(
    app_target: str | None, store_url: str | None, webhook_id: str, by: str
) -> None:
    """Unsubscribe the webhook ID; its deliveries go with it."""
    with client_for(app_target, store_url) as client:
        client.webhooks.remove(webhook_id, by=by)
    click.echo(f"webhook {webhook_id} removed")


@webhooks.command("deliveries", epilog=PRECEDENCE)
@where
@click.argument("webhook_id", metavar="[ID]", required=False)
@click.option("--failed", is_flag=True, help="Only the dead: every attempt failed.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@AS_JSON
def webhooks_deliveries(
    app_target: str | None,
    store_url: str | None,
    webhook_id: str | None,
    failed: bool,
    limit: int,
    as_json: bool,
) -> None:
    """The newest deliveries (of webhook ID); --failed: the dead-letter list."""
    with client_for(app_target, store_url) as client:
        found = client.webhooks.deliveries(webhook_id, failed=failed, limit=limit)
    if as_json:
        echo_json([DeliveryOut.of(item) for item in found])
        return
    echo_table(
        [
            Column("ID", justify="right"),
            Column("WEBHOOK"),
            Column("KIND"),
            Column("RUN", max_width=32),
            Column("STATE"),
            Column("ATTEMPTS", justify="right"),
            Column("NEXT"),
            Column("LAST ERROR", max_width=50),
        ],
        (
            [
                str(item.id),
                item.webhook,
                item.kind,
                item.run_id,
                item.state,
                str(item.attempts),
                "" if item.due_at is None else item.due_at.isoformat(timespec="seconds"),
                item.last_error or "",
            ]
            for item in found
        ),
    )
    if not found:
        click.echo("(no dead delivery)" if failed else "(no delivery)")


@webhooks.command("retry", epilog=PRECEDENCE)
@where
@click.argument("delivery_id", metavar="DELIVERY_ID", type=int)
@BY
def webhooks_retry(
    app_target: str | None, store_url: str | None, delivery_id: int, by: str
) -> None:
    """Send the dead delivery DELIVERY_ID again (the workers do, at once)."""
    with client_for(app_target, store_url) as client:
        client.webhooks.retry(delivery_id, by=by)
    click.echo(f"delivery {delivery_id} is due again; a worker sends it")


@webhooks.command("deliver", epilog=PRECEDENCE)
@where
def webhooks_deliver(app_target: str | None, store_url: str | None) -> None:
    """Send the deliveries due now, once, from this process (workers do it all the time)."""
    with client_for(app_target, store_url) as client:
        passed = client.webhooks.deliver()
    click.echo(f"{passed.delivered} delivered, {passed.failed} failed, {passed.dead} dead")


@cli.command(epilog=PRECEDENCE)
@where
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many.")
@AS_JSON
def listen(app_target: str | None, store_url: str | None, count: int | None, as_json: bool) -> None:
    """Print each run status change as it happens, a line each, until Ctrl-C. Not durable:
    changes while nobody listens are not kept (webhooks are the durable way). SQLite: this
    machine's processes only; PostgreSQL: once `durably changes on`."""
    done = threading.Event()
    heard = 0
    lock = threading.Lock()

    def show(change: StatusChange) -> None:
        nonlocal heard
        with lock:
            if done.is_set():
                return
            if as_json:
                click.echo(change.to_json())
            else:
                when = change.at.isoformat(timespec="milliseconds")
                click.echo(f"{when} {change.run} {change.workflow} {change.status}")
            heard += 1
            if count is not None and heard >= count:
                done.set()

    with client_for(app_target, store_url) as client:
        if not client.store.set_status_changes():
            click.echo("the change stream is off: `durably changes on` turns it on", err=True)
        stop = client.store.watch_status_changes(show)
        click.echo("listening (Ctrl-C stops)", err=True)
        try:
            while not done.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            stop()


@cli.command(epilog=PRECEDENCE)
@where
@click.argument("state", type=click.Choice(["on", "off", "show"]), default="show")
def changes(app_target: str | None, store_url: str | None, state: str) -> None:
    """Turn PostgreSQL's change stream (NOTIFY durably_changes on every run status change,
    what `durably listen` prints) on or off, for every process; as the tables' owner. Off by
    default: a NOTIFY per change costs the store's commits some 7%. SQLite's is always on."""
    with client_for(app_target, store_url) as client:
        on = client.store.set_status_changes(None if state == "show" else state == "on")
    click.echo(f"the change stream is {'on' if on else 'off'}")
