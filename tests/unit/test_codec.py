"""JSON encoding of inputs and results: dataclasses and pydantic models round-trip by type hint."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from durably.codec import NO_HINT, decode, decode_call, encode, encode_call, return_hint
from durably.errors import PayloadError


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int


@dataclass(frozen=True)
class Order:
    id: str
    lines: list[Line]
    placed_at: datetime
    note: str | None = None
    tags: list[str] = field(default_factory=list)


class Customer(pydantic.BaseModel):
    name: str
    email: str
    vip: bool = False


class Receipt(pydantic.BaseModel):
    order_id: str
    customer: Customer
    total_cents: int


class Opaque:
    """Neither JSON, a dataclass nor a model."""


@dataclass
class Holder:
    thing: Any


ORDER = Order("o-1", [Line("apple", 3), Line("pear", 1)], datetime(2026, 1, 2, 3, 4, tzinfo=UTC))
CUSTOMER = Customer(name="Ada", email="ada@example.com", vip=True)


# -- encode / decode ------------------------------------------------------------------------


def test_a_dataclass_round_trips_with_its_hint() -> None:
    text = encode(ORDER, what="the order")
    assert json.loads(text)["lines"] == [
        {"sku": "apple", "quantity": 3},
        {"sku": "pear", "quantity": 1},
    ]
    assert decode(text, Order, what="the order") == ORDER


def test_a_pydantic_model_round_trips_with_its_hint() -> None:
    receipt = Receipt(order_id="o-1", customer=CUSTOMER, total_cents=1250)
    decoded = decode(encode(receipt, what="the receipt"), Receipt, what="the receipt")
    assert isinstance(decoded, Receipt)
    assert decoded == receipt


def test_containers_of_models_round_trip() -> None:
    value = {"a": [CUSTOMER], "b": []}
    hint = dict[str, list[Customer]]
    assert decode(encode(value, what="v"), hint, what="v") == value


def test_without_a_hint_values_stay_plain_json() -> None:
    text = encode(ORDER, what="the order")
    plain = decode(text, NO_HINT, what="the order")
    assert plain["id"] == "o-1"
    assert plain["lines"][0] == {"sku": "apple", "quantity": 3}
    assert decode("[1, 2.5, null, true]", NO_HINT, what="x") == [1, 2.5, None, True]


@pytest.mark.parametrize(
    ("value", "type_name"),
    [(object(), "object"), (lambda x: x, "function"), (Opaque(), "Opaque")],
)
def test_an_unserializable_value_names_its_type_and_what_it_was(
    value: object, type_name: str
) -> None:
    with pytest.raises(PayloadError) as raised:
        encode(value, what="the result of step 'charge'")
    message = str(raised.value)
    assert message.startswith(f"the result of step 'charge' is a {type_name}, which durably cannot")
    assert "dataclass or a pydantic model" in message


def test_a_socket_cannot_be_stored() -> None:
    with (
        socket.socket() as sock,
        pytest.raises(PayloadError, match=r"^the connection is a socket,"),
    ):
        encode(sock, what="the connection")


def test_an_unserializable_value_nested_in_a_dataclass_is_refused() -> None:
    with pytest.raises(PayloadError, match=r"^the holder is a Holder, .*<class 'object'>"):
        encode(Holder(object()), what="the holder")


@pytest.mark.parametrize("text", ["not json", "", "{", '{"id": "o-1"'])
def test_malformed_json_is_a_payload_error(text: str) -> None:
    with pytest.raises(
        PayloadError, match=r"^the result of run 'r' holds a payload that cannot be read"
    ):
        decode(text, NO_HINT, what="the result of run 'r'")
    with pytest.raises(PayloadError, match="cannot be read"):
        decode(text, Order, what="the result of run 'r'")


def test_json_that_does_not_fit_the_hint_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="cannot be read"):
        decode('{"id": "o-1"}', Order, what="the order")
    with pytest.raises(PayloadError, match="cannot be read"):
        decode('{"name": 1}', Customer, what="the customer")


# -- encode_call / decode_call --------------------------------------------------------------


def positional(order: Order, customer: Customer, count: int) -> None: ...


def keywords(order: Order, *, customer: Customer, rush: bool = False) -> None: ...


def variadic(first: Line, *rest: Line, **labels: Customer) -> None: ...


def untyped(a, b=None):  # type: ignore[no-untyped-def]
    ...


def round_trip(fn: Any, *args: Any, **kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    return decode_call(encode_call(args, kwargs, what="fn"), fn, what="fn")


def test_positional_arguments_round_trip_into_their_parameter_types() -> None:
    args, kwargs = round_trip(positional, ORDER, CUSTOMER, 3)
    assert args == [ORDER, CUSTOMER, 3]
    assert isinstance(args[0], Order)
    assert isinstance(args[1], Customer)
    assert kwargs == {}


def test_keyword_arguments_round_trip_by_name() -> None:
    args, kwargs = round_trip(keywords, ORDER, customer=CUSTOMER, rush=True)
    assert args == [ORDER]
    assert kwargs == {"customer": CUSTOMER, "rush": True}
    assert isinstance(kwargs["customer"], Customer)


def test_a_positional_parameter_passed_by_keyword_keeps_its_type() -> None:
    args, kwargs = round_trip(positional, ORDER, customer=CUSTOMER, count=2)
    assert args == [ORDER]
    assert kwargs == {"customer": CUSTOMER, "count": 2}
    assert isinstance(kwargs["customer"], Customer)


def test_star_args_and_star_kwargs_use_their_hints() -> None:
    args, kwargs = round_trip(variadic, Line("a", 1), Line("b", 2), Line("c", 3), boss=CUSTOMER)
    assert args == [Line("a", 1), Line("b", 2), Line("c", 3)]
    assert all(isinstance(arg, Line) for arg in args)
    assert kwargs == {"boss": CUSTOMER}
    assert isinstance(kwargs["boss"], Customer)


def test_untyped_parameters_stay_plain_json() -> None:
    args, kwargs = round_trip(untyped, ORDER, b=[1, 2])
    assert args[0]["id"] == "o-1"
    assert kwargs == {"b": [1, 2]}


def test_an_unserializable_argument_names_the_call() -> None:
    with pytest.raises(PayloadError, match=r"^the input of step 'charge' is a dict"):
        encode_call([object()], {}, what="step 'charge'")


@pytest.mark.parametrize("text", ["not json", "[]", '{"args": []}', '{"kwargs": {}}', "null"])
def test_malformed_stored_input_is_a_payload_error(text: str) -> None:
    with pytest.raises(PayloadError, match=r"^the stored input of run 'r-1' cannot be read"):
        decode_call(text, positional, what="run 'r-1'")


def test_stored_input_that_does_not_fit_the_parameters_is_a_payload_error() -> None:
    text = json.dumps({"args": [{"id": "o-1"}, {}, "three"], "kwargs": {}})
    with pytest.raises(PayloadError, match=r"^the stored input of run 'r-1' does not fit"):
        decode_call(text, positional, what="run 'r-1'")


def test_return_hints() -> None:
    def gives_order() -> Order: ...
    def gives_nothing() -> None: ...
    def gives_any() -> Any: ...
    def unannotated():  # type: ignore[no-untyped-def]
        ...

    def gives_models() -> Iterator[Customer]: ...

    assert return_hint(gives_order) is Order
    assert return_hint(gives_nothing) is NO_HINT
    assert return_hint(gives_any) is NO_HINT
    assert return_hint(unannotated) is NO_HINT
    assert return_hint(gives_models) == Iterator[Customer]
