"""The rules of custom attributes (durably.core.attributes), pure: what a start may record,
what a search may ask for, and how `name=value` and `name:value` texts are read."""

from __future__ import annotations

import pytest

from durably.core.attributes import attributes_of, check_attributes, check_wanted
from durably.errors import PayloadError


def test_attributes_are_kept_exactly_as_given() -> None:
    given = {"customer": "42", "city": "Zürich", "note": " spaced: a=b ✓ "}

    assert check_attributes(given) == given
    assert check_attributes({}) == {}


def test_a_secret_looking_name_is_refused_for_a_start_but_may_be_searched_for() -> None:
    for name in ("password", "stripeApiKey", "db_password", "card-number", "ssn"):
        with pytest.raises(PayloadError, match="stored unencrypted, in the clear"):
            check_attributes({name: "x"})
        assert check_wanted({name: "x"}) == {name: "x"}  # finds nothing, says nothing


def test_texts_part_at_the_first_separator_since_names_hold_none() -> None:
    assert attributes_of(["customer=42", "plan:pro", "url=https://x.example/a=b"], "--attr") == {
        "customer": "42",
        "plan": "pro",
        "url": "https://x.example/a=b",
    }
    assert attributes_of(["note:a=b"], "attr") == {"note": "a=b"}
    assert attributes_of([], "attr") == {}
    with pytest.raises(PayloadError, match="--attr 'customer' is not an attribute: write"):
        attributes_of(["customer"], "--attr")
    with pytest.raises(PayloadError, match="attr names the attribute 'a' twice"):
        attributes_of(["a=1", "a:2"], "attr")
