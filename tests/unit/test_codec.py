"""JSON encoding of inputs and results: dataclasses and pydantic models round-trip by type hint."""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pydantic
import pytest

from durably.codec.encoding import decode, decode_call, encode, encode_call, return_hint
from durably.codec.parameters import NO_HINT
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
    text = encode(ORDER, Order, what="the order")
    assert json.loads(text)["lines"] == [
        {"sku": "apple", "quantity": 3},
        {"sku": "pear", "quantity": 1},
    ]
    assert decode(text, Order, what="the order") == ORDER


def test_a_pydantic_model_round_trips_with_its_hint() -> None:
    receipt = Receipt(order_id="o-1", customer=CUSTOMER, total_cents=1250)
    decoded = decode(encode(receipt, Receipt, what="the receipt"), Receipt, what="the receipt")
    assert isinstance(decoded, Receipt)
    assert decoded == receipt


def test_containers_of_models_round_trip() -> None:
    value = {"a": [CUSTOMER], "b": []}
    hint = dict[str, list[Customer]]
    assert decode(encode(value, hint, what="v"), hint, what="v") == value


def test_without_a_hint_values_stay_plain_json() -> None:
    text = encode(ORDER, Order, what="the order")
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
    assert message.startswith(
        f"the result of step 'charge' cannot be stored: result is {type_name} ("
    )
    assert "which durably cannot store as JSON" in message
    assert "dataclass or a pydantic model" in message


def test_a_socket_cannot_be_stored() -> None:
    with (
        socket.socket() as sock,
        pytest.raises(PayloadError, match=r"^the connection cannot be stored: result is socket "),
    ):
        encode(sock, what="the connection")


def test_an_unserializable_value_nested_in_a_dataclass_is_refused() -> None:
    with pytest.raises(
        PayloadError, match=r"^the holder cannot be stored: result.thing is object "
    ):
        encode(Holder(object()), Holder, what="the holder")


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
    return decode_call(encode_call(args, kwargs, fn, what="fn"), fn, what="fn")


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
    args, kwargs = round_trip(untyped, {"id": "o-1"}, b=[1, 2.5, None])
    assert args == [{"id": "o-1"}]
    assert kwargs == {"b": [1, 2.5, None]}


def test_an_unserializable_argument_names_the_call() -> None:
    with pytest.raises(
        PayloadError, match=r"^the input of step 'charge' cannot be stored: input.a is object "
    ):
        encode_call([object()], {}, untyped, what="step 'charge'")


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


# -- nothing is stored changed: refused with the path, or read back equal and same-typed --


class Colour(StrEnum):
    RED = "red"


class Size(IntEnum):
    SMALL = 1


@dataclass(frozen=True)
class Item:
    sku: str
    quantity: int


@dataclass(frozen=True)
class Basket:
    items: list[Item]
    labels: dict[str, Any]


def echo(data):  # type: ignore[no-untyped-def]  # a workflow without hints
    ...


def count_to(count: int, *chunks: bytes, **groups: set[int]) -> None: ...


def refusal(value: object, hint: Any = NO_HINT) -> str:
    with pytest.raises(PayloadError) as raised:
        encode(value, hint, what="the result of workflow 'w'")
    return str(raised.value)


def input_refusal(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(PayloadError) as raised:
        encode_call(args, kwargs, fn, what="workflow 'w'")
    return str(raised.value)


@pytest.mark.parametrize(
    ("data", "path", "given", "back", "suggested"),
    [
        ({"payload": b"raw-bytes"}, 'input.data["payload"]', "bytes", "str", "dict[str, bytes]"),
        ({1, 2}, "input.data", "set", "list", "set[int]"),
        ((1, "a"), "input.data", "tuple", "list", "tuple[int, str]"),
        ({"at": [datetime(2026, 1, 2)]}, 'input.data["at"][0]', "datetime", "str", "datetime"),
        ({"colour": Colour.RED}, 'input.data["colour"]', "Colour", "str", "Colour"),
        ([Size.SMALL], "input.data[0]", "Size", "int", "list[Size]"),
        (Item("apple", 3), "input.data", "Item", "dict", "data: Item"),
        (Decimal("1.10"), "input.data", "Decimal", "str", "data: Decimal"),
        (UUID(int=7), "input.data", "UUID", "str", "data: UUID"),
        (date(2026, 1, 2), "input.data", "date", "str", "data: date"),
        (timedelta(seconds=3), "input.data", "timedelta", "str", "data: timedelta"),
        (frozenset({"a"}), "input.data", "frozenset", "list", "frozenset[str]"),
    ],
)
def test_a_value_that_would_come_back_changed_is_refused_with_its_path(
    data: object, path: str, given: str, back: str, suggested: str
) -> None:
    message = input_refusal(echo, data)
    assert message.startswith(
        f"the input of workflow 'w' cannot be stored as it is: {path} is {given} ("
    )
    assert f"which would come back as {back} (" in message
    assert "without a type hint" in message
    assert "Annotate the parameter 'data'" in message
    assert suggested in message


def test_dict_keys_keep_their_type_or_are_refused() -> None:
    message = refusal({"a": {1: "one"}})
    assert "result[\"a\"] has the key int (1), which would come back as str ('1')" in message
    assert "`-> dict[str, dict[int, str]]`" in message
    assert decode(encode({1: "one"}, dict[int, str], what="v"), dict[int, str], what="v") == {
        1: "one"
    }


def test_a_value_that_contradicts_its_hint_is_refused() -> None:
    message = input_refusal(count_to, "5")
    assert message == (
        "the input of workflow 'w' cannot be stored as it is: input.count is str ('5'), which "
        "its type hint `int` would turn into int (5). Convert the value, or change the hint "
        "so that it says `str` there"
    )
    assert "bool (True)" in refusal(True, int)  # it would come back as 1
    assert "result is str ('x'), which its type hint `bytes` would turn into bytes (b'x')" in (
        refusal("x", bytes)
    )


def test_star_args_and_star_kwargs_are_checked_against_their_hints() -> None:
    assert "input.chunks[1] is str ('b')" in input_refusal(count_to, 1, b"a", "b")
    assert 'input.groups["odd"] is list ([1, 3])' in input_refusal(count_to, 1, odd=[1, 3])
    args, kwargs = round_trip(count_to, 1, b"a", b"b", odd={1, 3})
    assert args == [1, b"a", b"b"]
    assert kwargs == {"odd": {1, 3}}


def test_a_nested_difference_names_fields_and_indexes() -> None:
    def pack(basket: Basket) -> None: ...

    wrong = Basket([Item("apple", 3), Item("pear", "2")], {})  # type: ignore[arg-type]
    message = input_refusal(pack, wrong)
    assert "input.basket.items[1].quantity is str ('2')" in message
    assert "its type hint `Basket` would turn into int (2)" in message
    loose = Basket([], {"seen": {"a"}})
    assert "input.basket.labels[\"seen\"] is set ({'a'})" in input_refusal(pack, loose)


def test_arguments_that_do_not_fit_the_signature_are_refused() -> None:
    signature = "count_to(count: int, *chunks: bytes, **groups: set[int])"
    assert input_refusal(count_to) == (
        "the input of workflow 'w' does not fit its parameters (missing a required argument: "
        f"'count'): it takes {signature}"
    )
    assert "multiple values for argument 'count'" in input_refusal(count_to, 1, count=2)
    assert "too many positional arguments" in input_refusal(echo, 1, 2)
    assert "unexpected keyword argument 'other'" in input_refusal(echo, 1, other=2)


def test_a_result_with_a_hint_round_trips_equal_and_same_typed() -> None:
    value = {Colour.RED: (Size.SMALL, frozenset({b"x"}))}
    hint = dict[Colour, tuple[Size, frozenset[bytes]]]
    back = decode(encode(value, hint, what="v"), hint, what="v")
    assert back == value
    [(key, (size, chunks))] = back.items()
    assert type(key) is Colour
    assert type(size) is Size
    assert type(chunks) is frozenset
    assert type(next(iter(chunks))) is bytes


def test_an_int_for_a_float_hint_is_accepted_and_comes_back_a_float() -> None:
    back = decode(encode([1, 2.5], list[float], what="v"), list[float], what="v")
    assert back == [1.0, 2.5]
    assert type(back[0]) is float
    assert "would turn into float (9007199254740992.0)" in refusal(2**53 + 1, float)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused_where_they_are(number: float) -> None:
    """JSON has no number for them: written as bare words, other readers (the API's clients,
    a browser) would refuse them or read null. Refused, naming where."""
    for value, hint, where in [
        (number, NO_HINT, "result"),
        (number, float, "result"),
        ([1.0, number], list[float], "result[1]"),
        ({"level": number}, dict[str, float], "result['level']"),
    ]:
        with pytest.raises(PayloadError) as refused:
            encode(value, hint, what="v")
        assert f"{where} is {number}, which JSON has no number for" in str(refused.value)
    assert encode("NaN and Infinity, as words", what="v") == '"NaN and Infinity, as words"'


def test_nan_in_a_pydantic_model_is_refused_however_the_model_writes_it() -> None:
    class Reading(pydantic.BaseModel):  # pydantic writes NaN in a model as null
        value: float

    class Kept(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(ser_json_inf_nan="constants")
        value: float

    message = refusal(Reading(value=math.nan), Reading)
    assert message.startswith("the result of workflow 'w' cannot be stored: result.value would not")
    assert "`Reading`" in message
    with pytest.raises(PayloadError, match=r"result\['value'\] is nan"):
        encode(Kept(value=math.nan), Kept, what="v")


def test_bytes_that_are_not_utf8_are_refused_with_the_remedy() -> None:
    message = input_refusal(count_to, 1, b"\xff\xfe")
    assert message == (
        "the input of workflow 'w' cannot be stored: input.chunks[0] is bytes that are not "
        "valid UTF-8, which JSON text cannot hold; encode them first "
        "(base64.b64encode(data).decode()) and store the str"
    )


def test_values_json_cannot_hold_are_refused_with_their_path() -> None:
    looped: list[object] = []
    looped.append(looped)
    assert "result[0] is a list that contains itself" in refusal(looped)
    assert "result[1] is a str that is not valid Unicode" in refusal(["ok", "\ud800"])


def test_an_aware_datetime_keeps_its_offset_or_is_refused() -> None:
    for offset in (timedelta(0), timedelta(hours=-5, minutes=-30), timedelta(hours=23, minutes=59)):
        at = datetime(2026, 7, 1, 12, 0, 0, 123456, tzinfo=timezone(offset))
        back = decode(encode(at, datetime, what="v"), datetime, what="v")
        assert back == at
        assert back.utcoffset() == offset
    # JSON holds an offset, not a zone: Paris would come back as a fixed +02:00
    paris = datetime(2026, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris"))
    message = refusal(paris, datetime)
    assert "result is datetime (" in message
    assert "which would come back as another value" in message
    assert "convert it to UTC first (value.astimezone(timezone.utc))" in message
    odd = datetime(2026, 1, 2, tzinfo=timezone(timedelta(hours=1, seconds=30)))
    assert "convert it to UTC first" in refusal(odd, datetime)
    assert "convert it to UTC first" in refusal(time(1, tzinfo=ZoneInfo("Europe/Paris")), time)


def test_plain_json_is_not_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_read(text: str, hint: Any) -> Any:
        raise AssertionError("the fast path decoded")

    monkeypatch.setattr("durably.codec.encoding._read", no_read)
    assert encode({"a": [1, 2.5, None, True, "x"]}, what="v") == '{"a":[1,2.5,null,true,"x"]}'
    assert encode(3, int, what="v") == "3"
    with pytest.raises(PayloadError, match="the fast path decoded"):
        encode(3, float, what="v")  # an int for a float is read back
