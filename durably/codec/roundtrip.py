"""Does a value come back from its JSON as it went in? The comparison behind codec.encode,
and the paths and hints its error messages name. No I/O, and no import of pydantic itself
(only pydantic_core, which codec loads anyway): a model in a value means it is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pydantic_core

__all__ = [
    "PLAIN_SCALARS",
    "Difference",
    "Unstorable",
    "describe",
    "difference",
    "hint_for",
    "is_plain",
    "key_path",
    "type_name",
    "unstorable",
    "writes",
]

PLAIN_SCALARS = frozenset({type(None), bool, int, str})  # JSON as they are
# Leaves for which == says all (exact types are compared before): no need to look further
_EQUAL_IS_SAME = frozenset({*PLAIN_SCALARS, bytes, Decimal, UUID, date, timedelta})
_MISSING: Any = object()  # a field or key the decoded value does not have


@dataclass(frozen=True, slots=True)
class Difference:
    """The first place where the decoded value differs from the given one."""

    path: str
    given: Any
    back: Any  # what reading the JSON gives at `path` (_MISSING: nothing)
    key: bool = False  # it is a dict key that differs, not the value under it


@dataclass(frozen=True, slots=True)
class Unstorable:
    """The innermost part of a value that cannot be written as JSON at all, and why."""

    path: str
    value: Any
    why: str


def is_plain(value: Any) -> bool:
    """Whether `value` is JSON as it is (None, bool, int, str, finite float, list, dict with
    str keys, all the way down): its JSON reads back as the same value with the same types,
    so no decode is needed to know it. The hot path: every step result comes through here,
    so scalars inside containers are checked inline, without a call each."""
    kind = type(value)
    if kind in PLAIN_SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)  # NaN and infinities take the checked path
    if kind is list:
        items = value
    elif kind is dict:
        for key in value:
            if type(key) is not str:
                return False
        items = value.values()
    else:
        return False
    for item in items:  # noqa: SIM110 (a loop: all() would build a generator)
        if type(item) not in PLAIN_SCALARS and not is_plain(item):
            return False
    return True


def difference(given: Any, back: Any, path: str) -> Difference | None:
    """The first difference between `given` and `back` (its value after the JSON round
    trip): another type at any level, or another value. None: they are the same."""
    kind = type(given)
    if kind is not type(back):
        # an int where the hint says float comes back as an equal float: nothing is lost
        if kind is int and type(back) is float and given == back:
            return None
        return Difference(path, given, back)
    if kind in _EQUAL_IS_SAME:  # the common leaves first: one test instead of ten
        return None if given == back else Difference(path, given, back)
    if kind is float:
        same = given == back or (math.isnan(given) and math.isnan(back))
        return None if same else Difference(path, given, back)
    if isinstance(given, list | tuple):
        return _sequence_difference(given, back, path)
    if isinstance(given, dict):
        return _dict_difference(given, back, path)
    if isinstance(given, set | frozenset):
        return _set_difference(given, back, path)
    names = _dataclass_fields(given.__class__)
    if names is not None:
        return _fields_difference(given, back, names, path)
    fields = _model_fields(given)
    if fields is not None:
        found = _fields_difference(given, back, fields, path)
        extra = getattr(given, "__pydantic_extra__", None)
        if found is None and (extra or getattr(back, "__pydantic_extra__", None)):
            return _dict_difference(extra or {}, back.__pydantic_extra__ or {}, path)
        return found
    if isinstance(given, datetime | time):
        return None if _same_moment(given, back) else Difference(path, given, back)
    try:
        same = bool(given == back)
    except Exception:  # a type whose == cannot answer cannot be checked, so is not stored
        same = False
    return None if same else Difference(path, given, back)


def unstorable(value: Any, path: str) -> Unstorable:
    """Where and why pydantic cannot write `value` as JSON: descends into the first part
    that fails on its own, down to the part that fails while all of its own parts pass."""
    chain: set[int] = set()  # ids on the way down: meeting one again is a cycle
    while True:
        if id(value) in chain:
            why = f"a {type_name(type(value))} that contains itself (JSON cannot hold a cycle)"
            return Unstorable(path, value, why)
        chain.add(id(value))
        for child_path, child in _parts(value, path):
            if not writes(child):
                value, path = child, child_path
                break
        else:
            return Unstorable(path, value, _why(value))


def writes(value: Any) -> bool:
    """Whether pydantic can write `value` as JSON."""
    try:
        pydantic_core.to_json(value)
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError):
        return False
    return True


def hint_for(value: Any, depth: int = 0) -> str:
    """A type hint under which `value` would round-trip, for error messages: `bytes`,
    `dict[str, set[int]]`, `Order`. A suggestion, not a promise: the check runs again."""
    kind = type(value)
    if value is None:
        return "None"
    if depth > 3:
        return "Any"
    if kind in (list, set, frozenset):
        return f"{kind.__name__}[{_union(value, depth)}]"
    if kind is tuple:
        if 0 < len(value) <= 4:
            return f"tuple[{', '.join(hint_for(item, depth + 1) for item in value)}]"
        return f"tuple[{_union(value, depth)}, ...]"
    if kind is dict:
        return f"dict[{_union(value.keys(), depth)}, {_union(value.values(), depth)}]"
    return type_name(kind)


def type_name(kind: type) -> str:
    """`Order`, `Outer.Inner`: the qualified name, less any `<locals>` part."""
    return kind.__qualname__.rpartition("<locals>.")[2]


def describe(value: Any) -> str:
    """`bytes (b'raw-bytes')`: the type, then a short repr."""
    if value is _MISSING:
        return "nothing"
    text = repr(value)
    return f"{type_name(type(value))} ({text if len(text) <= 60 else text[:57] + '...'})"


def key_path(path: str, key: Any) -> str:
    """`input.data["payload"]` for a str key (as the reader would write it), `[3]` else."""
    if type(key) is str:
        return f'{path}["{key}"]'
    return f"{path}[{key!r}]"


def _same_moment(given: datetime | time, back: datetime | time) -> bool:
    """Same wall time at the same UTC offset, in a zone that comes back as itself. JSON keeps
    the offset only: a named zone (ZoneInfo) would come back as a fixed offset, which
    computes differently across a change of daylight saving time."""
    zone = given.tzinfo
    if zone is not None and not isinstance(zone, timezone) and type(zone) is not type(back.tzinfo):
        return False
    wall, wall_back = given.replace(tzinfo=None), back.replace(tzinfo=None)
    return wall == wall_back and given.utcoffset() == back.utcoffset()


def _sequence_difference(given: Any, back: Any, path: str) -> Difference | None:
    if len(given) != len(back):
        return Difference(path, given, back)
    for index, (item, item_back) in enumerate(zip(given, back, strict=True)):
        found = difference(item, item_back, f"{path}[{index}]")
        if found is not None:
            return found
    return None


def _dict_difference(given: dict[Any, Any], back: Any, path: str) -> Difference | None:
    if len(given) != len(back):  # two keys written alike ({1: .., "1": ..}) read back as one
        return Difference(path, given, back)
    # JSON objects and pydantic keep the order of keys, so the n-th key comes back n-th
    for (key, item), (key_back, item_back) in zip(given.items(), back.items(), strict=True):
        where = key_path(path, key)
        if difference(key, key_back, where) is not None:
            return Difference(path, key, key_back, key=True)
        found = difference(item, item_back, where)
        if found is not None:
            return found
    return None


def _set_difference(given: Any, back: Any, path: str) -> Difference | None:
    if len(given) != len(back):
        return Difference(path, given, back)
    equal_in_back = {item: item for item in back}  # a set has no order: match by equality
    for item in given:
        match = equal_in_back.get(item, _MISSING)
        if match is _MISSING and item != item:  # NaN: not equal to itself, so not found
            match = next((other for other in back if other != other), _MISSING)
        if match is _MISSING:
            return Difference(path, given, back)
        found = difference(item, match, f"{path}{{{item!r}}}")
        if found is not None:
            return found
    return None


def _fields_difference(given: Any, back: Any, names: Any, path: str) -> Difference | None:
    for name in names:
        found = difference(
            getattr(given, name, _MISSING), getattr(back, name, _MISSING), f"{path}.{name}"
        )
        if found is not None:
            return found
    return None


@functools.cache
def _dataclass_fields(kind: type) -> tuple[str, ...] | None:
    """A dataclass's field names, or None for any other class. Cached per class: this runs
    for every typed result, and dataclasses.fields() is slow."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(field.name for field in dataclasses.fields(kind))


def _model_fields(value: Any) -> list[str] | None:
    """A pydantic model's field names, or None if `value` is no model. No import: a model
    instance means pydantic is loaded, and its class says so."""
    fields = getattr(type(value), "__pydantic_fields__", None)
    if fields is None or not hasattr(value, "__pydantic_fields_set__"):
        return None
    return list(fields)


def _parts(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{key_path(path, key)} (the key)", key
            yield key_path(path, key), item
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield f"{path}[{index}]", item
    elif isinstance(value, set | frozenset):
        for item in value:
            yield f"{path}{{{item!r}}}", item
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield f"{path}.{field.name}", getattr(value, field.name, None)
    elif (fields := _model_fields(value)) is not None:
        for name in fields:
            yield f"{path}.{name}", getattr(value, name, None)


def _why(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return (
            "bytes that are not valid UTF-8, which JSON text cannot hold; encode them "
            "first (base64.b64encode(data).decode()) and store the str"
        )
    if isinstance(value, str):
        return "a str that is not valid Unicode (it holds a lone surrogate)"
    return (
        f"{describe(value)}, which durably cannot store as JSON; use JSON types, "
        "a dataclass or a pydantic model"
    )


def _union(items: Any, depth: int) -> str:
    names = dict.fromkeys(hint_for(item, depth + 1) for item in itertools.islice(items, 50))
    return " | ".join(names) or "Any"
