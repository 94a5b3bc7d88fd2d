"""JSON encoding of inputs and results. Dataclasses and pydantic models round-trip through
the type hints of the function that takes or returns them. Nothing is pickled."""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic_core

from durably.errors import PayloadError

__all__ = ["NO_HINT", "decode", "decode_call", "encode", "encode_call", "return_hint"]

NO_HINT: Any = object()  # "no type hint": values stay plain JSON
# JSON's own types: a value that already is one needs no validation, and so no pydantic
# (whose import costs ~0.1 s on the first typed value). Anything else goes through pydantic.
_PLAIN = frozenset({int, str, float, bool})


def encode(value: object, *, what: str) -> str:
    """JSON text for `value`; `what` names the value in the error if it cannot be stored."""
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise PayloadError(
            f"{what} is a {type(value).__qualname__}, which durably cannot store as JSON "
            f"({exc}); use JSON types, a dataclass or a pydantic model"
        ) from None


def decode(text: str, hint: Any, *, what: str) -> Any:
    """The value `text` holds, validated into the type `hint` (no hint: plain JSON)."""
    try:
        if hint is NO_HINT:
            return json.loads(text)
        if hint in _PLAIN:
            value = json.loads(text)
            if type(value) is hint:
                return value
        return _adapter(hint).validate_json(text)
    except ValueError as exc:  # json.JSONDecodeError and pydantic.ValidationError
        raise PayloadError(f"{what} holds a payload that cannot be read: {exc}") from None


def encode_call(args: Sequence[object], kwargs: Mapping[str, object], *, what: str) -> str:
    return encode({"args": list(args), "kwargs": dict(kwargs)}, what=f"the input of {what}")


def decode_call(
    text: str, fn: Callable[..., object], *, what: str
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for `fn`, validated into its parameter types."""
    try:
        payload = json.loads(text)
        raw_args, raw_kwargs = payload["args"], payload["kwargs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PayloadError(f"the stored input of {what} cannot be read: {exc}") from None
    positional, by_name, rest_positional, rest_named = _parameter_hints(fn)
    try:
        args = [
            _validate(positional[i] if i < len(positional) else rest_positional, value)
            for i, value in enumerate(raw_args)
        ]
        kwargs = {
            name: _validate(by_name.get(name, rest_named), value)
            for name, value in raw_kwargs.items()
        }
    except ValueError as exc:
        raise PayloadError(
            f"the stored input of {what} does not fit its parameters: {exc}"
        ) from None
    return args, kwargs


def return_hint(fn: Callable[..., object]) -> Any:
    hint = _hints(fn).get("return", NO_HINT)
    return NO_HINT if hint in (None, type(None), Any) else hint


def _validate(hint: Any, value: Any) -> Any:
    if hint is NO_HINT or (hint in _PLAIN and type(value) is hint):
        return value
    return _adapter(hint).validate_python(value)


@functools.cache
def _parameter_hints(
    fn: Callable[..., object],
) -> tuple[list[Any], dict[str, Any], Any, Any]:
    hints = _hints(fn)
    positional: list[Any] = []
    by_name: dict[str, Any] = {}
    rest_positional = rest_named = NO_HINT
    for parameter in inspect.signature(fn).parameters.values():
        hint = hints.get(parameter.name, NO_HINT)
        if parameter.kind is parameter.VAR_POSITIONAL:
            rest_positional = hint
        elif parameter.kind is parameter.VAR_KEYWORD:
            rest_named = hint
        else:
            if parameter.kind is not parameter.KEYWORD_ONLY:
                positional.append(hint)
            by_name[parameter.name] = hint
    return positional, by_name, rest_positional, rest_named


def _hints(fn: Callable[..., object]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to plain JSON
        return {}


@functools.cache
def _adapter_cached(hint: Any) -> Any:
    from pydantic import TypeAdapter  # imported on first typed value: keeps start-up fast

    return TypeAdapter(hint)


def _adapter(hint: Any) -> Any:
    try:
        return _adapter_cached(hint)
    except TypeError:  # an unhashable hint cannot be cached
        from pydantic import TypeAdapter

        return TypeAdapter(hint)
