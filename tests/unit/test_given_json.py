"""JSON a person wrote (`durably start --input`, `durably dlq skip --result`), read through
type hints strictly: JSON's own form of each type is taken, nothing is converted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from durably.codec.encoding import decode_given, decode_given_call, encode_call
from durably.codec.parameters import NO_HINT
from durably.errors import PayloadError


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int


def ship(lines: tuple[Line, ...], at: datetime, tags: set[str], *, price: Decimal) -> None: ...


@pytest.mark.parametrize(
    ("text", "hint", "value"),
    [
        ('"2026-01-01T00:00:00Z"', datetime, datetime(2026, 1, 1, tzinfo=UTC)),
        ('{"sku": "a", "quantity": 2}', Line, Line("a", 2)),
        ("[1, 2]", tuple[int, ...], (1, 2)),
        ('["a", "b"]', set[str], {"a", "b"}),
        ('"1.50"', Decimal, Decimal("1.50")),
        ('"raw"', bytes, b"raw"),
        ("1", float, 1.0),
        ('{"1": "a"}', dict[int, str], {1: "a"}),
        ('{"any": [1, "x"]}', NO_HINT, {"any": [1, "x"]}),
    ],
)
def test_json_forms_of_a_type_are_read_into_it(text: str, hint: Any, value: Any) -> None:
    read = decode_given(text, hint, what="the result")

    assert read == value
    assert type(read) is type(value)


@pytest.mark.parametrize(
    ("text", "hint", "where"),
    [
        ('"5"', int, "at result, input should be a valid integer"),
        ("true", int, "at result, input should be a valid integer"),
        ("5", str, "at result, input should be a valid string"),
        ('{"sku": "a", "quantity": "2"}', Line, "at result.quantity, input should be"),
    ],
)
def test_nothing_is_converted(text: str, hint: Any, where: str) -> None:
    with pytest.raises(PayloadError, match=f"the result does not fit the type hint .*: {where}"):
        decode_given(text, hint, what="the result")


def test_a_call_by_name_is_read_through_each_parameters_hint() -> None:
    text = (
        '{"lines": [{"sku": "a", "quantity": 1}], "at": "2026-01-01T00:00:00+00:00",'
        ' "tags": ["x"], "price": "2.5"}'
    )

    args, kwargs = decode_given_call(text, ship, what="workflow 'ship'")

    assert args == []
    assert kwargs == {
        "lines": (Line("a", 1),),
        "at": datetime(2026, 1, 1, tzinfo=UTC),
        "tags": {"x"},
        "price": Decimal("2.5"),
    }
    stored = encode_call(args, kwargs, ship, what="workflow 'ship'")  # as app.start stores it
    assert '"lines":[{"sku":"a","quantity":1}]' in stored


def test_a_call_by_position_is_read_in_order() -> None:
    args, kwargs = decode_given_call(
        '[[], "2026-01-01T00:00:00Z", ["y"]]', lambda lines, at, tags: None, what="w"
    )

    assert (args, kwargs) == ([[], "2026-01-01T00:00:00Z", ["y"]], {})  # no hints: as given


def test_a_call_that_does_not_fit_is_refused() -> None:
    with pytest.raises(PayloadError, match="does not fit its parameters"):
        decode_given_call('[[], "2026-01-01T00:00:00Z", []]', ship, what="workflow 'ship'")
    with pytest.raises(
        PayloadError, match=r"`set\[str\]`: at input\.tags, input should be a valid array"
    ):
        decode_given_call(
            '{"lines": [], "at": "2026-01-01T00:00:00Z", "tags": "x", "price": "1"}',
            ship,
            what="workflow 'ship'",
        )
