"""Payloads encrypted at rest, on both stores: a secret planted in a run's input, a step's
result, a signal's data and an approval's details is nowhere in the database's rows (nor in
the SQLite file's bytes), every value comes back as it went in to a process with the key, a
process without it sees `encrypted (key k1)` and is refused the value (never handed another),
and rotation moves every row onto the new key while old values stay readable."""

from __future__ import annotations

import base64
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.codec.encryption import PREFIX, Keyring, new_key
from durably.core.history import EventKind
from durably.errors import ConfigError, PayloadError
from durably.stores import open_store
from durably.stores.encrypted import EncryptedStore
from durably.testing import FakeClock
from durably.views.details import detail
from durably.views.timeline import describe_run

SECRET = "4111-1111-SECRET"
_TABLES = (
    "durably_runs",
    "durably_events",
    "durably_inbox",
    "durably_published_events",
    "durably_stream_items",
)


def ring(*ids: str, known: dict[str, str]) -> Keyring:
    """A keyring of these ids, the first current; each id's key made once per test."""
    for key_id in ids:
        known.setdefault(key_id, new_key())
    return Keyring.parse([f"{key_id}:{known[key_id]}" for key_id in ids], where="the test")


@pytest.fixture
def known() -> dict[str, str]:
    return {}


def shop(store_url: str, clock: FakeClock, keys: Keyring | None) -> durably.App:
    app = durably.App(open_store(store_url, keys=keys), clock=clock, seed=1)

    @app.step
    async def charge(card: str) -> dict[str, str]:
        return {"charged": card}

    @app.step
    async def notify(request: durably.ApprovalRequest) -> None:
        pass

    @app.workflow
    async def order(card: str) -> str:
        charged = await charge(card)
        durably.set_event("card", card)  # what a run publishes is sealed too
        durably.write_stream("cards", card)
        pin = await durably.wait_for_signal("pin", timeout="1h")
        decision = await durably.approval("ship", notify=notify, details={"card": card})
        return f"{charged['charged']} {pin} {decision.approved}"

    return app


def run_order(app: durably.App, run_id: str) -> None:
    app.start("order", SECRET, id=run_id)
    app.run_until_idle()
    app.client.signal(run_id, "pin", f"pin-{SECRET}")
    app.run_until_idle()
    app.client.decide(run_id, "ship", approved=True, by="ada", comment="fine")
    app.run_until_idle()


def raw_rows(store_url: str) -> list[str]:
    """Every row of durably's payload tables, as the database holds it."""
    rows: list[str] = []
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            for table in _TABLES:
                rows += [repr(row) for row in db.execute(f"SELECT * FROM {table}")]
        return rows
    import psycopg

    with psycopg.connect(store_url) as db:
        for table in _TABLES:
            rows += [repr(row) for row in db.execute(f"SELECT * FROM {table}")]  # type: ignore[arg-type]
    return rows


def test_no_plaintext_of_a_planted_secret_is_stored(
    store_url: str, clock: FakeClock, known: dict[str, str]
) -> None:
    app = shop(store_url, clock, ring("k1", known=known))
    run_order(app, "o-1")
    assert app.handle("o-1").result() == f"{SECRET} pin-{SECRET} True"
    # the history a process with the key reads holds every value as it went in
    events = app.client.history("o-1")
    kinds = {event.kind: event for event in reversed(events)}  # each kind's first
    assert kinds[EventKind.STEP_COMPLETED].data == '{"charged":"' + SECRET + '"}'
    assert SECRET in (kinds[EventKind.SIGNAL_RECEIVED].data or "")
    assert SECRET in (kinds[EventKind.APPROVAL_REQUESTED].data or "")
    app.close()

    rows = raw_rows(store_url)
    assert rows
    assert not [row for row in rows if SECRET in row]
    assert any(f"{PREFIX}k1:" in row for row in rows)
    if store_url.startswith("sqlite"):  # the file's bytes, write-ahead log included
        path = Path(store_url.removeprefix("sqlite:///"))
        files = [path, *path.parent.glob(path.name + "-*")]
        assert not [f for f in files if SECRET.encode() in f.read_bytes()]


def test_a_process_without_the_key_sees_encrypted_and_is_refused_the_value(
    store_url: str, clock: FakeClock, known: dict[str, str]
) -> None:
    app = shop(store_url, clock, ring("k1", known=known))
    run_order(app, "o-1")
    app.close()

    blind = shop(store_url, clock, None)
    run = blind.client.get("o-1")
    events = blind.client.history("o-1")
    shown = dict(describe_run(run, events))
    assert shown["input"] == shown["result"] == "encrypted (key k1)"
    words = [detail(event) for event in events]
    assert "charge(encrypted (key k1)), key o-1:0:charge" in words
    assert "returned encrypted (key k1)" in words
    assert not [word for word in words if SECRET in word]
    with pytest.raises(PayloadError, match=r"encrypted with the key 'k1'.*DURABLY_KEYS"):
        blind.handle("o-1").result()
    blind.close()


def test_rotation_moves_every_row_to_the_new_key_and_old_values_stay_readable(
    store_url: str, clock: FakeClock, known: dict[str, str]
) -> None:
    before = shop(store_url, clock, None)  # stored in the clear, before encryption
    run_order(before, "o-0")
    before.close()
    first = shop(store_url, clock, ring("k1", known=known))
    run_order(first, "o-1")
    first.start("order", SECRET, id="o-open")  # pending, its input in the inbox-free row
    first.close()

    both = shop(store_url, clock, ring("k2", "k1", known=known))
    run_order(both, "o-2")  # new values take the new key
    assert both.handle("o-1").result() == f"{SECRET} pin-{SECRET} True"  # old ones still open
    store = both.store
    assert isinstance(store, EncryptedStore)
    total = store.payload_rows()
    assert sum(store.rotate(batch=7)) == total  # batches smaller than a history
    both.close()

    rows = raw_rows(store_url)
    assert not [row for row in rows if f"{PREFIX}k1:" in row or SECRET in row]
    only_new = shop(store_url, clock, ring("k2", known=known))
    for run_id in ("o-0", "o-1", "o-2"):
        assert only_new.handle(run_id).result() == f"{SECRET} pin-{SECRET} True"
        assert only_new.handle(run_id).get_event("card") == SECRET
        assert list(only_new.handle(run_id).read_stream("cards")) == [SECRET]
    only_new.run_until_idle()  # the pending run goes on under k2
    only_new.client.signal("o-open", "pin", "x")
    only_new.run_until_idle()
    assert only_new.client.get("o-open").status is durably.RunStatus.NEEDS_ATTENTION
    only_new.close()


def test_a_value_changed_in_the_database_is_refused(
    store_url: str, clock: FakeClock, known: dict[str, str]
) -> None:
    app = shop(store_url, clock, ring("k1", known=known))
    app.start("order", SECRET, id="o-1")
    app.close()
    sealed = raw_input(store_url, "o-1")
    head, _, body = sealed.rpartition(":")
    raw = bytearray(base64.urlsafe_b64decode(body))
    raw[-1] ^= 1  # one bit of the tag
    write_input(store_url, "o-1", f"{head}:{base64.urlsafe_b64encode(bytes(raw)).decode()}")
    reopened = shop(store_url, clock, ring("k1", known=known))
    with pytest.raises(PayloadError, match="does not open with it: the value was changed"):
        reopened.client.get("o-1")
    reopened.close()


def raw_input(store_url: str, run_id: str) -> str:
    return _one(store_url, "SELECT input FROM durably_runs WHERE id = {mark}", run_id)


def write_input(store_url: str, run_id: str, text: str) -> None:
    _one(store_url, "UPDATE durably_runs SET input = {mark} WHERE id = {mark}", text, run_id)


def _one(store_url: str, sql: str, *params: Any) -> Any:
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            row = db.execute(sql.format(mark="?"), params).fetchone()
            return None if row is None else row[0]
    import psycopg

    with psycopg.connect(store_url) as db:
        cursor = db.execute(sql.format(mark="%s"), params)  # type: ignore[arg-type]
        row = cursor.fetchone() if cursor.description else None
        return None if row is None else row[0]


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"DURABLY_KEYS": "k1"}, "is no key: write each as id:base64key"),
        ({"DURABLY_KEYS": "k1:c2hvcnQ="}, "has 5 bytes; AES-256 needs 32"),
        ({"DURABLY_KEYS": "k1:not base64!"}, "is not base64"),
        ({"DURABLY_KEYS": "bad/id:" + "A" * 44}, "the key id 'bad/id' is not allowed"),
        ({"DURABLY_KEYS": "a", "DURABLY_KEYS_FILE": "b"}, "not both"),
        ({"DURABLY_KEYS_FILE": "/nonexistent/keys"}, "cannot be read"),
    ],
)
def test_keys_that_cannot_be_used_are_refused_naming_what_is_wrong(
    given: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(")):
        Keyring.from_environment(given)


def test_keys_come_from_a_file_the_first_one_current(tmp_path: Path) -> None:
    first, second = new_key(), new_key()
    path = tmp_path / "keys"
    path.write_text(f"# newest first\nk2 {first}\nk1 {second}  # the old one\n")
    keys = Keyring.from_environment({"DURABLY_KEYS_FILE": str(path)})
    assert keys is not None
    assert keys.ids == ("k2", "k1")
    assert keys.current == "k2"
    assert keys.open(keys.seal("[1]")) == "[1]"
    assert Keyring.from_environment({}) is None


def test_the_rotate_command_seals_with_the_new_key_and_says_how_far_it_got(
    store_url: str, clock: FakeClock, known: dict[str, str]
) -> None:
    app = shop(store_url, clock, ring("k1", known=known))
    run_order(app, "o-1")
    app.close()
    both = ",".join(f"{key_id}:{known.setdefault(key_id, new_key())}" for key_id in ("k2", "k1"))
    rotate = [sys.executable, "-m", "durably", "keys", "rotate", "--store", store_url]
    done = subprocess.run(
        [*rotate, "--batch", "3"],
        env={**os.environ, "DURABLY_KEYS": both},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "every payload is now sealed with k2" in done.stdout
    rows = raw_rows(store_url)
    assert not [row for row in rows if f"{PREFIX}k1:" in row]
    assert [row for row in rows if f"{PREFIX}k2:" in row]

    unkeyed = {k: v for k, v in os.environ.items() if not k.startswith("DURABLY_KEYS")}
    refused = subprocess.run(rotate, env=unkeyed, capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    assert "no keys are given: set DURABLY_KEYS or DURABLY_KEYS_FILE" in refused.stderr
