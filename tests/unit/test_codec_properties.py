"""Properties of the codec over many generated values: what it stores reads back equal and
of the same type, and what would not is refused; never a changed value."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durably.codec.encoding import decode, decode_call, encode, encode_call, read_back
from durably.codec.parameters import NO_HINT
from durably.errors import PayloadError
from tests.payloads import HINTS, json_native, same, values_for

SETTINGS = settings(max_examples=300, deadline=None)


def taking(hint: Any) -> Any:
    """A function whose one parameter has the type `hint`."""

    def fn(value: Any) -> None: ...

    fn.__annotations__ = {"value": hint, "return": None}
    return fn


@SETTINGS
@given(st.data(), HINTS)
def test_supported_values_round_trip_through_their_hints(data: st.DataObject, hint: Any) -> None:
    value = data.draw(values_for(hint), label="value")
    back = decode(encode(value, hint, what="v"), hint, what="v")
    assert same(value, back)
    fn = taking(hint)
    args, kwargs = decode_call(encode_call([value], {}, fn, what="f"), fn, what="f")
    assert same(value, args[0])
    assert kwargs == {}


@SETTINGS
@given(st.data(), HINTS)
def test_without_a_hint_only_json_types_are_stored(data: st.DataObject, hint: Any) -> None:
    value = data.draw(values_for(hint), label="value")
    if json_native(value):
        assert same(value, decode(encode(value, what="v"), NO_HINT, what="v"))
    else:
        with pytest.raises(PayloadError, match=r"^v cannot be stored"):
            encode(value, what="v")


@SETTINGS
@given(st.data(), HINTS, HINTS)
def test_a_value_is_refused_or_read_back_unchanged_under_any_hint(
    data: st.DataObject, made_for: Any, hint: Any
) -> None:
    value = data.draw(values_for(made_for), label="value")
    try:
        text = encode(value, hint, what="v")
    except PayloadError:
        return
    assert same(value, decode(text, hint, what="v"), widening=True)


def shapes(a, /, b, c=1, *rest, d, e=2, **more):  # type: ignore[no-untyped-def]
    ...


def strict(a, b=1, *, c):  # type: ignore[no-untyped-def]
    ...


def nothing() -> None: ...


@SETTINGS
@given(
    st.sampled_from([shapes, strict, nothing]),
    st.integers(0, 5),
    st.lists(st.sampled_from(["a", "b", "c", "d", "e", "rest", "more", "x"]), unique=True),
)
def test_a_call_is_stored_exactly_when_it_fits_the_signature(
    fn: Any, count: int, names: list[str]
) -> None:
    args, kwargs = list(range(count)), {name: 0 for name in names}
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        with pytest.raises(PayloadError, match=r"^the input of f does not fit its parameters"):
            encode_call(args, kwargs, fn, what="f")
    else:
        assert decode_call(encode_call(args, kwargs, fn, what="f"), fn, what="f") == (
            args,
            kwargs,
        )


@SETTINGS
@given(st.data(), HINTS)
def test_a_result_reads_back_as_its_decode_would(data: st.DataObject, hint: Any) -> None:
    """What a step's caller gets (read_back) is what a replay gets (the decode): a scalar
    that reads back as itself is handed back as it is, anything else is decoded afresh."""
    value = data.draw(values_for(hint), label="value")
    text = encode(value, hint, what="v")
    back = read_back(value, text, hint, what="v")
    assert same(back, decode(text, hint, what="v"))
    if isinstance(value, (list, dict)):
        assert back is not value  # the caller's copy is its own, as a replay's would be
