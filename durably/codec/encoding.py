"""JSON encoding of inputs and results. A value is stored only if it reads back equal and of
the same type, through the type hint of the function that takes or returns it (dataclasses,
pydantic models, bytes, sets, datetimes, ...); anything else is refused with a PayloadError
that names where in the value it is. Nothing is pickled, and nothing is silently changed.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, time
from typing import Any

import pydantic_core

from durably.codec.encryption import KEYS_ENV, KEYS_FILE_ENV, sealed_key
from durably.codec.parameters import (
    NO_HINT,
    Target,
    hints_of,
    is_fast,
    marked_hints,
    parameters_of,
    unmarked,
)
from durably.codec.roundtrip import (
    PLAIN_SCALARS,
    Difference,
    describe,
    difference,
    hint_for,
    is_plain,
    type_name,
    unstorable,
    writes,
)
from durably.core.secrets import WRAPPER, SecretHint, secret_hint
from durably.errors import ConfigError, PayloadError

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "check_limit",
    "decode",
    "decode_call",
    "decode_given",
    "decode_given_call",
    "encode",
    "encode_call",
    "read_back",
    "return_hint",
    "within_limit",
]

# JSON's own types: a value that already is one needs no validation, and so no pydantic
# (whose import costs ~0.1 s on the first typed value). Anything else goes through pydantic.
_PLAIN = frozenset({int, str, float, bool})
_JSON_TYPES = "JSON types (str, int, float, bool, None, list, dict with str keys)"
_UNWRITABLE = (pydantic_core.PydanticSerializationError, ValueError, RecursionError)


def encode(
    value: object,
    hint: Any = NO_HINT,
    *,
    what: str,
    path: str = "result",
    limit: int | None = None,
) -> str:
    """JSON text for `value`, checked to read back (through `hint`) as an equal value of the
    same type. `what` names the value in the PayloadError if not ("the result of step 'x'")
    and `path` is its root in the path to the part that differs. `limit`: the most bytes
    the text may take (App(max_payload=)); None: no limit."""
    if type(hint) is SecretHint:  # Secret[T]: checked as a T, stored marked
        inner = encode(value, hint.inner, what=what, path=path)
        return within_limit(f"{_MARKED}{inner}}}", limit, what=what)
    try:
        text = pydantic_core.to_json(value).decode()
    except _UNWRITABLE:
        raise _unwritable([(path, value)], what=what) from None
    if "NaN" in text or "Infinity" in text:  # the words, maybe inside a string: look closer
        _refuse_not_finite(json.loads(text), path, what=what)
    # _fast, inlined: every step result comes through here
    if not ((hint is NO_HINT or hint is type(value) or hint is Any) and is_plain(value)):
        _check(value, functools.partial(_read, text, hint), Target(path, hint), what=what)
    return within_limit(text, limit, what=what)


DEFAULT_MAX_PAYLOAD = 1 << 20  # 1 MiB: what an input, a result or a message may take as JSON


def check_limit(limit: object) -> int | None:
    """`limit` as a payload limit (App(max_payload=)): bytes, 1 or more, or None for none."""
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ConfigError(f"max_payload is a number of bytes (1 or more) or None, not {limit!r}")
    return limit


def within_limit(text: str, limit: int | None, *, what: str) -> str:
    """`text`, if its UTF-8 takes at most `limit` bytes; PayloadError, naming both, if not."""
    if limit is None or len(text) <= limit // 4:  # 4 bytes a character at most: no count
        return text
    size = len(text.encode())
    if size > limit:
        raise PayloadError(
            f"{what} takes {size:,} bytes as JSON, over the limit of {limit:,} "
            "(App(max_payload=...)): keep large data elsewhere (a file, an object store, a "
            "table of yours) and pass a reference to it"
        )
    return text


def read_back(value: object, text: str, hint: Any, *, what: str) -> Any:
    """What a replay sees of `value`, which `encode` wrote as `text`: the value decoded from
    it. A None, bool, int or str given where its own type (or no type) is expected reads back
    as itself, and is immutable: handed back as it is, without a decode (every step result
    comes through here)."""
    if type(value) in PLAIN_SCALARS and (hint is NO_HINT or hint is type(value) or hint is Any):
        return value
    return decode(text, hint, what=what)


def decode(text: str, hint: Any, *, what: str) -> Any:
    """The value `text` holds, validated into the type `hint` (no hint: plain JSON)."""
    if type(hint) is SecretHint:
        return decode(_unmarked_text(text), hint.inner, what=what)
    try:
        return _read(text, hint)
    except ValueError as exc:  # json.JSONDecodeError and pydantic.ValidationError
        _refuse_sealed(text, what=what)
        raise PayloadError(f"{what} holds a payload that cannot be read: {exc}") from None


def encode_call(
    args: Sequence[object],
    kwargs: Mapping[str, object],
    fn: Callable[..., object],
    *,
    what: str,
    limit: int | None = None,
) -> str:
    """JSON text for a call of `fn`, `{"args": [...], "kwargs": {...}}`, each argument checked
    like `encode` against its own parameter's hint (and the whole against `limit` bytes).
    Arguments that do not fit `fn`'s signature are refused too: they could never be passed
    to it."""
    parameters = parameters_of(fn)
    if not parameters.fits(args, kwargs):
        parameters.bind(args, kwargs, what=what)
    stored_args, stored_kwargs = (
        parameters.marked(args, kwargs) if parameters.secrets else (args, kwargs)
    )
    try:
        text = pydantic_core.to_json(
            {"args": list(stored_args), "kwargs": dict(stored_kwargs)}
        ).decode()
    except _UNWRITABLE:
        parts = [(target.path, value) for target, value in parameters.targets(args, kwargs)]
        raise _unwritable(parts, what=f"the input of {what}") from None
    not_finite = "NaN" in text or "Infinity" in text
    if parameters.plain(args, kwargs) and not not_finite:  # the hot path: plain JSON
        return within_limit(text, limit, what=f"the input of {what}")
    stored = json.loads(text)
    raws = [*stored["args"], *stored["kwargs"].values()]
    if parameters.secrets:  # each marked one checked as its own value
        pairs = zip(parameters.targets(args, kwargs), raws, strict=True)
        raws = [unmarked(raw) if target.secret else raw for (target, _), raw in pairs]
    if not_finite:
        for (target, _), raw in zip(parameters.targets(args, kwargs), raws, strict=True):
            _refuse_not_finite(raw, target.path, what=f"the input of {what}")
    for (target, value), raw in zip(parameters.targets(args, kwargs), raws, strict=True):
        if not is_fast(target.hint, value):
            read_back = functools.partial(_validate, target.hint, raw)
            _check(value, read_back, target, what=f"the input of {what}")
    return within_limit(text, limit, what=f"the input of {what}")


def decode_call(
    text: str, fn: Callable[..., object], *, what: str, limit: int | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for `fn`, validated into its parameter types; a
    stored input over `limit` bytes is refused unread."""
    within_limit(text, limit, what=f"the stored input of {what}")
    try:
        payload = json.loads(text)
        raw_args, raw_kwargs = payload["args"], payload["kwargs"]
    except (ValueError, KeyError, TypeError) as exc:
        _refuse_sealed(text, what=f"the stored input of {what}")
        raise PayloadError(f"the stored input of {what} cannot be read: {exc}") from None
    parameters = parameters_of(fn)
    if parameters.secrets:
        raw_args, raw_kwargs = parameters.unmarked(raw_args, raw_kwargs)
    try:
        args = [_validate(parameters.hint_at(i), value) for i, value in enumerate(raw_args)]
        kwargs = {
            name: _validate(parameters.hint_named(name), value)
            for name, value in raw_kwargs.items()
        }
    except ValueError as exc:
        raise PayloadError(
            f"the stored input of {what} does not fit its parameters: {exc}"
        ) from None
    return args, kwargs


def decode_given(text: str, hint: Any, *, what: str) -> Any:
    """A value a person wrote as JSON (`durably dlq skip --result`), read through `hint` the
    way its stored form is, but strictly: only JSON's own form of each type is taken (an
    object for a dataclass, a string for a datetime), nothing is converted ("5" is no int)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"{what} is not JSON: {exc}") from None
    if type(hint) is SecretHint:  # a person gives the value itself, not its stored form
        hint = hint.inner
    return _given(value, Target("result", hint), what=what)


def decode_given_call(
    text: str, fn: Callable[..., object], *, what: str
) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for `fn` from JSON a person wrote (`durably start --input`): a list is passed
    by position, an object by name; each argument is read like `decode_given`."""
    try:
        given = json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"the input of {what} is not JSON: {exc}") from None
    if not isinstance(given, list | dict):
        raise PayloadError(
            f"the input of {what} must be a JSON list (the arguments by position) or object "
            f"(by name), not {describe(given)}"
        )
    args, kwargs = (given, {}) if isinstance(given, list) else ([], given)
    parameters = parameters_of(fn)
    if not parameters.fits(args, kwargs):
        parameters.bind(args, kwargs, what=what)
    what = f"the input of {what}"
    return (
        [_given(value, parameters.target_at(i), what=what) for i, value in enumerate(args)],
        {
            name: _given(value, parameters.target_named(name), what=what)
            for name, value in kwargs.items()
        },
    )


def return_hint(fn: Callable[..., object]) -> Any:
    """The hint results of `fn` are read back through: NO_HINT for none (plain JSON), a
    SecretHint for `Secret[T]` (stored marked, shown redacted)."""
    hint = hints_of(fn).get("return", NO_HINT)
    hint = NO_HINT if hint in (None, type(None), Any, object) else hint
    return SecretHint(hint) if secret_hint(marked_hints(fn).get("return")) else hint


# -- values typed durably.Secret[...] ---------------------------------------------------------

_MARKED = '{"' + WRAPPER + '":'  # how a marked value's JSON begins; it ends with "}"


def _unmarked_text(text: str) -> str:
    """The JSON of a marked value (as it was stored before it was marked: as it is)."""
    return text[len(_MARKED) : -1] if text.startswith(_MARKED) and text.endswith("}") else text


def _refuse_sealed(text: str, *, what: str) -> None:
    """PayloadError if `text` is a value encrypted with a key this process does not hold
    (durably.codec.encryption): it is refused, naming the key, never read as something else."""
    key = sealed_key(text)
    if key is not None:
        raise PayloadError(
            f"{what} is encrypted with the key {key!r}, which this process does not hold: "
            f"give it in {KEYS_ENV} or {KEYS_FILE_ENV} (docs/how-to/encryption.md)"
        )


# -- numbers JSON cannot write ---------------------------------------------------------------

# NaN and the infinities are written as bare words, NaN and Infinity: not JSON (other readers
# refuse them, and a browser's JSON shows null).


def _refuse_not_finite(stored: object, path: str, *, what: str) -> None:
    """Raise PayloadError naming the first NaN or infinity in `stored` (JSON, read back)."""
    if isinstance(stored, float) and not math.isfinite(stored):
        raise PayloadError(
            f"{what} cannot be stored: {path} is {stored}, which JSON has no number for (NaN "
            "and the infinities are not JSON); send None, or the value as a string"
        )
    if isinstance(stored, dict):
        for key, part in stored.items():
            _refuse_not_finite(part, f"{path}[{key!r}]", what=what)
    elif isinstance(stored, list):
        for index, part in enumerate(stored):
            _refuse_not_finite(part, f"{path}[{index}]", what=what)


# -- the check --------------------------------------------------------------------------------


def _unwritable(parts: list[tuple[str, object]], *, what: str) -> PayloadError:
    """The error for a value pydantic cannot write as JSON, made of `parts` (itself, or a
    call's arguments, by path): it names the innermost part that cannot be written."""
    for path, part in parts:
        if not writes(part):
            found = unstorable(part, path)
            return PayloadError(f"{what} cannot be stored: {found.path} is {found.why}")
    return PayloadError(f"{what} cannot be stored as JSON")


def _check(value: object, read_back: Callable[[], Any], target: Target, *, what: str) -> None:
    """Raise PayloadError unless `read_back()` gives `value` again, equal and same-typed."""
    try:
        back = read_back()
    except pydantic_core.ValidationError as exc:
        raise PayloadError(_unreadable(exc, target, what=what)) from None
    except Exception as exc:  # a hint pydantic cannot read into, a validator that raises
        raise PayloadError(
            f"{what} cannot be stored: reading it back as `{_name(target.hint)}` fails "
            f"({type(exc).__name__}: {exc}). Convert the value, or change the hint"
        ) from None
    found = difference(value, back, target.path)
    if found is not None:
        raise PayloadError(_changed(found, value, target, what=what))


def _changed(found: Difference, value: object, target: Target, *, what: str) -> str:
    given = f"has the key {describe(found.given)}" if found.key else f"is {describe(found.given)}"
    head = f"{what} cannot be stored as it is: {found.path} {given}"
    back = describe(found.back)
    if type(found.given) is type(found.back):  # same type, another value: no hint helps
        head = f"{head}, which would come back as another value: {back}"
        if repr(found.given) != repr(found.back):
            return f"{head}. {_convert(found.given)}"
        name = type_name(type(found.given))
        return f"{head} (they look alike, but are not equal: does {name} define ==?)"
    if target.hint is NO_HINT:
        example = target.annotation.format(hint_for(value))
        return (
            f"{head}, which would come back as {back} without a type hint. Annotate "
            f"{target.noun} (e.g. `{example}`) so that it round-trips, or convert the value "
            f"to {_JSON_TYPES}"
        )
    return (
        f"{head}, which its type hint `{_name(target.hint)}` would turn into {back}. "
        f"Convert the value, or change the hint so that it says `{hint_for(found.given)}` there"
    )


def _convert(value: object) -> str:
    if isinstance(value, datetime | time) and value.tzinfo is not None:
        return (
            "JSON keeps a UTC offset (in whole minutes), not a time zone: convert it to UTC "
            "first (value.astimezone(timezone.utc)), and store the zone's name apart if needed"
        )
    return "Convert it to a value that JSON holds exactly"


def _unreadable(exc: pydantic_core.ValidationError, target: Target, *, what: str) -> str:
    error = exc.errors(include_url=False)[0]
    where = target.path + "".join(_loc_part(part) for part in error["loc"])
    return (
        f"{what} cannot be stored: {where} would not read back through the type hint "
        f"`{_name(target.hint)}` ({error['msg']}; the value is {describe(error['input'])}). "
        "Convert the value, or change the hint"
    )


def _loc_part(part: str | int) -> str:
    """A step of a pydantic error location, written like our paths (it cannot tell a field
    from a str key: an identifier is written as a field)."""
    if part == "[key]":  # pydantic's mark for "the key", not the value under it
        return " (the key)"
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if part.isidentifier() else f'["{part}"]'


def _name(hint: Any) -> str:
    if isinstance(hint, type):
        return type_name(hint)
    return repr(hint).replace("typing.", "")


def _given(value: Any, target: Target, *, what: str) -> Any:
    if target.hint is NO_HINT:
        return value
    try:  # as JSON text: strict mode then takes JSON's forms (a str for a datetime, ...)
        return _adapter(target.hint).validate_json(json.dumps(value), strict=True)
    except pydantic_core.ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = target.path + "".join(_loc_part(part) for part in error["loc"])
        why = error["msg"][:1].lower() + error["msg"][1:]
        raise PayloadError(
            f"{what} does not fit the type hint `{_name(target.hint)}`: at {where}, {why} "
            f"(the value is {describe(error['input'])})"
        ) from None


# -- reading ----------------------------------------------------------------------------------


def _read(text: str, hint: Any) -> Any:
    if hint is NO_HINT:
        return json.loads(text)
    if hint in _PLAIN:
        value = json.loads(text)
        if type(value) is hint:
            return value
    return _adapter(hint).validate_json(text)


def _validate(hint: Any, value: Any) -> Any:
    if hint is NO_HINT or (hint in _PLAIN and type(value) is hint):
        return value
    return _adapter(hint).validate_python(value)


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
