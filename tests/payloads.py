"""Values of every type durably stores, with the type hints they round-trip through, as
hypothesis strategies; and `same`, equality that also holds the types to account."""

from __future__ import annotations

import dataclasses
import math
import types
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import Enum, IntEnum, StrEnum
from typing import Any, get_args, get_origin
from uuid import UUID

import pydantic
from hypothesis import strategies as st


class Colour(StrEnum):
    RED = "red"
    GREEN = "green"


class Size(IntEnum):
    SMALL = 1
    LARGE = 3


class Mood(Enum):
    CALM = "calm"
    CROSS = 2


class Address(pydantic.BaseModel):
    street: str
    tags: frozenset[str]
    moved_in: datetime


@dataclass(frozen=True)
class Record:
    """Every supported kind of value at once: what a real workflow's input looks like."""

    blob: bytes
    ids: set[int]
    labels: frozenset[str]
    sizes: tuple[int, ...]
    at: datetime
    day: date
    price: Decimal
    ref: UUID
    colour: Colour
    address: Address
    names: dict[int, str]
    readings: list[float]


# Offsets of whole minutes: ISO 8601 has no seconds in an offset, so a datetime at +01:00:30
# is refused rather than stored 30 seconds off (a unit test shows it).
OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
AWARE = st.datetimes(timezones=OFFSETS)

LEAVES: dict[Any, st.SearchStrategy[Any]] = {
    int: st.integers(),
    # -0.0 and subnormals included; NaN and the infinities are refused (tests/unit/test_codec)
    float: st.floats(allow_nan=False, allow_infinity=False),
    str: st.text(),
    bool: st.booleans(),
    type(None): st.none(),
    bytes: st.text().map(str.encode),  # bytes that are not UTF-8 are refused (a unit test)
    Decimal: st.decimals(allow_nan=False, allow_infinity=False),
    UUID: st.uuids(),
    date: st.dates(),
    datetime: st.one_of(st.datetimes(), AWARE),
    time: st.times(timezones=st.none() | OFFSETS),
    timedelta: st.timedeltas(),
    Colour: st.sampled_from(Colour),
    Size: st.sampled_from(Size),
    Mood: st.sampled_from(Mood),
}
KEYS = [str, int, bool, float, bytes, Decimal, UUID, date, datetime, Colour, Size]
ADDRESSES = st.builds(Address, street=st.text(), tags=st.frozensets(st.text()), moved_in=AWARE)
RECORDS = st.builds(
    Record,
    blob=LEAVES[bytes],
    ids=st.sets(st.integers()),
    labels=st.frozensets(st.text()),
    sizes=st.lists(st.integers()).map(tuple),
    at=AWARE,
    day=st.dates(),
    price=LEAVES[Decimal],
    ref=st.uuids(),
    colour=st.sampled_from(Colour),
    address=ADDRESSES,
    names=st.dictionaries(st.integers(), st.text()),
    readings=st.lists(st.floats(allow_nan=False, allow_infinity=False)),
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.sampled_from(KEYS)
    return st.one_of(
        inner.map(lambda hint: list[hint]),  # type: ignore[valid-type]
        inner.map(lambda hint: tuple[hint, ...]),  # type: ignore[valid-type]
        inner.map(lambda hint: hint | None),
        st.tuples(inner, inner).map(lambda pair: tuple[pair[0], pair[1]]),  # type: ignore[valid-type]
        st.sampled_from(KEYS).map(lambda hint: set[hint]),  # type: ignore[valid-type]
        st.sampled_from(KEYS).map(lambda hint: frozenset[hint]),  # type: ignore[valid-type]
        st.tuples(keys, inner).map(lambda kv: dict[kv[0], kv[1]]),  # type: ignore[valid-type]
    )


HINTS: st.SearchStrategy[Any] = st.recursive(
    st.sampled_from([*LEAVES, Address, Record]), _containers, max_leaves=4
)


def _non_json_leaves() -> st.SearchStrategy[Any]:
    plain = (int, float, str, bool, type(None))
    return st.one_of(
        *(strategy for hint, strategy in LEAVES.items() if hint not in plain),
        ADDRESSES,
        RECORDS,
        st.lists(st.integers(), max_size=3).map(tuple),
        st.sets(st.integers(), max_size=3),
        st.frozensets(st.text(), max_size=3),
        st.dictionaries(st.integers(), st.text(), min_size=1, max_size=3),
    )


# Values with a part of a type JSON does not have, anywhere inside plain lists and dicts.
NON_JSON: st.SearchStrategy[Any] = st.recursive(
    st.deferred(_non_json_leaves),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(st.text(), inner, min_size=1, max_size=3)
    ),
    max_leaves=4,
)


def values_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values of the type `hint` says."""
    if hint in LEAVES:
        return LEAVES[hint]
    if hint is Address:
        return ADDRESSES
    if hint is Record:
        return RECORDS
    origin, args = get_origin(hint), get_args(hint)
    if origin is list:
        return st.lists(values_for(args[0]), max_size=4)
    if origin is tuple:
        if args[-1] is Ellipsis:
            return st.lists(values_for(args[0]), max_size=4).map(tuple)
        return st.tuples(*(values_for(arg) for arg in args))
    if origin is set:
        return st.sets(values_for(args[0]), max_size=4)
    if origin is frozenset:
        return st.frozensets(values_for(args[0]), max_size=4)
    if origin is dict:
        return st.dictionaries(values_for(args[0]), values_for(args[1]), max_size=3)
    if origin is types.UnionType:
        return st.one_of(*(values_for(arg) for arg in args))
    raise AssertionError(f"no strategy for {hint!r}")


def json_native(value: Any) -> bool:
    """Whether `value` is made of JSON's own types only (floats of any kind)."""
    if value is None or type(value) in (bool, int, str, float):
        return True
    if type(value) is list:
        return all(json_native(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and json_native(item) for key, item in value.items())
    return False


def same(given: Any, back: Any, *, widening: bool = False) -> bool:
    """Equal, of the same type at every level (NaN equal to NaN; an aware time at the same
    offset). `widening`: an int may come back as an equal float (a `float` hint says so).
    Written apart from durably's own comparison, to check it."""

    def alike(a: Any, b: Any) -> bool:
        return same(a, b, widening=widening)

    if type(given) is not type(back):
        return widening and type(given) is int and type(back) is float and given == back
    if isinstance(given, float):
        return given == back or (math.isnan(given) and math.isnan(back))
    if isinstance(given, list | tuple):
        return len(given) == len(back) and all(map(alike, given, back))
    if isinstance(given, dict):
        return len(given) == len(back) and all(
            alike(key, key_back) and alike(item, item_back)
            for (key, item), (key_back, item_back) in zip(given.items(), back.items(), strict=True)
        )
    if isinstance(given, set | frozenset):
        return len(given) == len(back) and all(any(alike(a, b) for b in back) for a in given)
    if dataclasses.is_dataclass(given):
        names = [field.name for field in dataclasses.fields(given)]
        return all(alike(getattr(given, name), getattr(back, name)) for name in names)
    if isinstance(given, pydantic.BaseModel):
        names = list(type(given).model_fields)
        return all(alike(getattr(given, name), getattr(back, name)) for name in names)
    if isinstance(given, datetime | time):
        return bool(given == back) and given.utcoffset() == back.utcoffset()
    return bool(given == back)
