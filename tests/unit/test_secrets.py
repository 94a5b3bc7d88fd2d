"""Which values are secrets, how they are shown, and how the codec stores a value typed
durably.Secret[...]: marked, read back as it was given, and never differently."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from durably import Secret
from durably.codec.encoding import decode, decode_call, encode, encode_call, return_hint
from durably.core.secrets import (
    REDACTED,
    SecretHint,
    add_names,
    is_secret_name,
    redact,
    redact_text,
    scrub,
    secrets_in,
)
from durably.errors import PayloadError


@pytest.mark.parametrize(
    "name",
    ["password", "db_password", "stripeApiKey", "api-key", "card_number", "CardNumber", "PIN"],
)
def test_names_that_say_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["order", "spin", "amount", "passwords_changed_at", "japan", 3])
def test_names_that_do_not(name: object) -> None:
    assert not is_secret_name(name)


def test_an_app_adds_names() -> None:
    assert not is_secret_name("routing_number_x1")
    add_names(["routingNumberX1"])
    assert is_secret_name("routing_number_x1")


def test_redact_replaces_values_under_secret_names_and_marked_values() -> None:
    value = {"user": "ada", "auth": {"token": "t-1", "scopes": ["a"]}, "card": {"$secret": "4111"}}
    assert redact(value) == {
        "user": "ada",
        "auth": {"token": REDACTED, "scopes": ["a"]},
        "card": REDACTED,
    }
    assert redact([{"password": None}]) == [{"password": REDACTED}]


def test_redact_text_reaches_json_held_in_a_field_and_leaves_other_text() -> None:
    event = json.dumps({"message": 1, "data": json.dumps({"pin": "9999"}), "sender": "ada"})
    shown = json.loads(redact_text(event))
    assert json.loads(shown["data"]) == {"pin": REDACTED}
    assert redact_text("not json: password=x") == "not json: password=x"
    assert redact_text('{"a": 1}') == '{"a": 1}'  # nothing to hide: the text as it was


def test_secrets_are_scrubbed_from_messages_longest_first() -> None:
    found = secrets_in({"password": "hunter22", "nested": {"api_key": 12345678}, "x": "hunter"})
    assert found == ["hunter22", "12345678"]
    assert scrub("login hunter22 failed (key 12345678)", found) == (
        f"login {REDACTED} failed (key {REDACTED})"
    )
    assert secrets_in({"pin": "12"}) == []  # too short to scrub from text safely


@dataclass
class Card:
    number: str
    expiry: str


def charge(card: Secret[Card], amount: int, *, note: Secret[str] = "") -> Secret[str]:
    return "ok"


def test_a_secret_parameter_is_stored_marked_and_read_back_as_given() -> None:
    text = encode_call([Card("4111", "12/30"), 5], {"note": "vip"}, charge, what="charge")
    stored = json.loads(text)
    assert stored == {
        "args": [{"$secret": {"number": "4111", "expiry": "12/30"}}, 5],
        "kwargs": {"note": {"$secret": "vip"}},
    }
    assert decode_call(text, charge, what="charge") == ([Card("4111", "12/30"), 5], {"note": "vip"})
    older = json.dumps({"args": [{"number": "4111", "expiry": "12/30"}, 5], "kwargs": {}})
    assert decode_call(older, charge, what="charge") == ([Card("4111", "12/30"), 5], {})


def test_a_secret_result_is_stored_marked_and_checked_like_its_type() -> None:
    hint = return_hint(charge)
    assert hint == SecretHint(str)
    assert encode("tok-1", hint, what="the result") == '{"$secret":"tok-1"}'
    assert decode('{"$secret":"tok-1"}', hint, what="the result") == "tok-1"
    assert decode('"tok-1"', hint, what="the result") == "tok-1"  # stored before it was marked
    with pytest.raises(PayloadError, match="cannot be stored"):
        encode({1, 2}, hint, what="the result")
