"""Reading the fields of an event's JSON data, each with the message that names what is wrong
(durably.core.payloads turns it into a PayloadError naming the event)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from durably.core.history import Event
from durably.errors import PayloadError

__all__ = [
    "Unreadable",
    "boolean",
    "integer",
    "json_object",
    "moment",
    "optional_integer",
    "optional_moment",
    "optional_number",
    "optional_string",
    "string",
    "unreadable",
]


class Unreadable(Exception):
    """A field is missing or of the wrong type (turned into a PayloadError naming the event)."""


def unreadable(event: Event, why: str) -> PayloadError:
    step = "" if event.name is None else f" of step {event.name!r}"
    return PayloadError(
        f"event #{event.seq} ({event.kind}){step} holds unreadable data {event.data!r}: {why}"
    )


def string(data: Mapping[str, object], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise Unreadable(wanted(key, "a string", value, key in data))
    return value


def integer(data: Mapping[str, object], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):  # JSON true is no number
        raise Unreadable(wanted(key, "an integer", value, key in data))
    return value


def optional_integer(data: Mapping[str, object], key: str) -> int | None:
    return None if data.get(key) is None else integer(data, key)


def boolean(data: Mapping[str, object], key: str, default: bool | None = None) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise Unreadable(wanted(key, "true or false", value, key in data))
    return value


def optional_string(data: Mapping[str, object], key: str) -> str | None:
    return None if data.get(key) is None else string(data, key)


def json_object(data: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise Unreadable(wanted(key, "an object", value, key in data))
    return value


def moment(data: Mapping[str, object], key: str) -> datetime:
    return datetime.fromisoformat(string(data, key))  # a ValueError if it is no ISO 8601 time


def optional_moment(data: Mapping[str, object], key: str) -> datetime | None:
    return None if data.get(key) is None else moment(data, key)


def optional_number(data: Mapping[str, object], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise Unreadable(wanted(key, "a number", value, True))
    return float(value)


def wanted(key: str, what: str, value: object, present: bool) -> str:
    return f"{key!r} should be {what}, not {value!r}" if present else f"{key!r} is missing"
