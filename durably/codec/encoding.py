"""JSON encoding of inputs and results. A value is stored only if it reads back equal and of
the same type, through the type hint of the function that takes or returns it (dataclasses,
pydantic models, bytes, sets, datetimes, ...); anything else is refused with a PayloadError
that names where in the value it is. Nothing is pickled, and nothing is silently changed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any, NamedTuple

import pydantic_core

from durably.codec.encryption import KEYS_ENV, KEYS_FILE_ENV, sealed_key
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
from durably.errors import ConfigError, PayloadError

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "NO_HINT",
    "check_limit",
    "decode",
    "decode_call",
    "decode_given",
    "decode_given_call",
    "encode",
    "encode_call",
    "return_hint",
    "within_limit",
]

NO_HINT: Any = object()  # "no type hint": values stay plain JSON
# JSON's own types: a value that already is one needs no validation, and so no pydantic
# (whose import costs ~0.1 s on the first typed value). Anything else goes through pydantic.
_PLAIN = frozenset({int, str, float, bool})
_JSON_TYPES = "JSON types (str, int, float, bool, None, list, dict with str keys)"
_UNWRITABLE = (pydantic_core.PydanticSerializationError, ValueError, RecursionError)


class _Target(NamedTuple):  # not a frozen dataclass: made per typed value, and faster so
    """Where a value goes: its path in messages, and the hint it is read back with."""

    path: str  # "result", "input.order", "input.lines[2]"
    hint: Any
    noun: str = "the return type"  # what to annotate
    annotation: str = "-> {}"  # how, with the suggested hint in {}


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
    try:
        text = pydantic_core.to_json(value).decode()
    except _UNWRITABLE:
        raise _unwritable([(path, value)], what=what) from None
    if "NaN" in text or "Infinity" in text:  # the words, maybe inside a string: look closer
        _refuse_not_finite(json.loads(text), path, what=what)
    # _fast, inlined: every step result comes through here
    if not ((hint is NO_HINT or hint is type(value) or hint is Any) and is_plain(value)):
        _check(value, functools.partial(_read, text, hint), _Target(path, hint), what=what)
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


def decode(text: str, hint: Any, *, what: str) -> Any:
    """The value `text` holds, validated into the type `hint` (no hint: plain JSON)."""
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
    parameters = _parameters(fn)
    if not parameters.fits(args, kwargs):
        parameters.bind(args, kwargs, what=what)
    try:
        text = pydantic_core.to_json({"args": list(args), "kwargs": dict(kwargs)}).decode()
    except _UNWRITABLE:
        parts = [(target.path, value) for target, value in parameters.targets(args, kwargs)]
        raise _unwritable(parts, what=f"the input of {what}") from None
    not_finite = "NaN" in text or "Infinity" in text
    if parameters.plain(args, kwargs) and not not_finite:  # the hot path: plain JSON
        return within_limit(text, limit, what=f"the input of {what}")
    stored = json.loads(text)
    raws = [*stored["args"], *stored["kwargs"].values()]
    if not_finite:
        for (target, _), raw in zip(parameters.targets(args, kwargs), raws, strict=True):
            _refuse_not_finite(raw, target.path, what=f"the input of {what}")
    for (target, value), raw in zip(parameters.targets(args, kwargs), raws, strict=True):
        if not _fast(target.hint, value):
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
    parameters = _parameters(fn)
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
    return _given(value, _Target("result", hint), what=what)


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
    parameters = _parameters(fn)
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
    hint = _hints(fn).get("return", NO_HINT)
    return NO_HINT if hint in (None, type(None), Any, object) else hint


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


def _fast(hint: Any, value: object) -> bool:
    """True if `value` reads back unchanged without looking: plain JSON, and a hint that
    leaves plain JSON as it is (none, Any, or exactly the value's own type)."""
    return (hint is NO_HINT or hint is type(value) or hint is Any) and is_plain(value)


def _unwritable(parts: list[tuple[str, object]], *, what: str) -> PayloadError:
    """The error for a value pydantic cannot write as JSON, made of `parts` (itself, or a
    call's arguments, by path): it names the innermost part that cannot be written."""
    for path, part in parts:
        if not writes(part):
            found = unstorable(part, path)
            return PayloadError(f"{what} cannot be stored: {found.path} is {found.why}")
    return PayloadError(f"{what} cannot be stored as JSON")


def _check(value: object, read_back: Callable[[], Any], target: _Target, *, what: str) -> None:
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


def _changed(found: Difference, value: object, target: _Target, *, what: str) -> str:
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


def _unreadable(exc: pydantic_core.ValidationError, target: _Target, *, what: str) -> str:
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


def _given(value: Any, target: _Target, *, what: str) -> Any:
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


# -- parameters -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Parameters:
    """A function's parameters as the codec needs them: the hint and the path of the value
    each argument position or name goes to, and what a call must pass."""

    fn: Callable[..., object]
    positional: tuple[_Target, ...]  # parameters that can be passed by position, in order
    named: dict[str, _Target]  # parameters that can be passed by name
    index: dict[str, int]  # the position of each parameter that can be passed both ways
    required: tuple[tuple[str | None, int], ...]  # (name if nameable, position or -1)
    rest_positional: _Target | None  # *args: the hint of each element
    rest_named: _Target | None  # **kwargs
    hints: tuple[Any, ...]  # the hints of `positional`, for the hot path
    rest_hint: Any  # the hint of *args' elements (NO_HINT if none)

    def hint_at(self, position: int) -> Any:
        if position < len(self.positional):
            return self.positional[position].hint
        return NO_HINT if self.rest_positional is None else self.rest_positional.hint

    def hint_named(self, name: str) -> Any:
        target = self.named.get(name, self.rest_named)
        return NO_HINT if target is None else target.hint

    def target_at(self, position: int) -> _Target:
        if position < len(self.positional):
            return self.positional[position]
        rest = self.rest_positional or _Target("input.args", NO_HINT, "*args", "*args: {}")
        return _element(rest, f"[{position - len(self.positional)}]")

    def target_named(self, name: str) -> _Target:
        if name in self.named:
            return self.named[name]
        rest = self.rest_named or _Target("input.kwargs", NO_HINT, "**kwargs", "**kwargs: {}")
        return _element(rest, f'["{name}"]')

    def targets(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> list[tuple[_Target, object]]:
        """Each argument with where it goes: positional ones first, then named ones."""
        parts = [(self.target_at(i), value) for i, value in enumerate(args)]
        return parts + [(self.target_named(name), value) for name, value in kwargs.items()]

    def fits(self, args: Sequence[object], kwargs: Mapping[str, object]) -> bool:
        """A quick yes for a call that surely binds; `bind` says why one does not."""
        count = len(args)
        if count > len(self.positional) and self.rest_positional is None:
            return False
        for name in kwargs:
            if name not in self.named:
                if self.rest_named is None:
                    return False
            elif self.index.get(name, count) < count:  # passed by position too
                return False
        for nameable, position in self.required:
            if not (0 <= position < count or (nameable is not None and nameable in kwargs)):
                return False
        return True

    def plain(self, args: Sequence[object], kwargs: Mapping[str, object]) -> bool:
        """Whether every argument reads back unchanged without looking: _fast, inlined,
        since every step call comes through here (parameter hints of Any are NO_HINT)."""
        hints, count = self.hints, len(self.hints)
        for position, value in enumerate(args):
            hint = hints[position] if position < count else self.rest_hint
            kind = type(value)
            if (hint is not NO_HINT and hint is not kind) or (
                kind not in PLAIN_SCALARS and not is_plain(value)
            ):
                return False
        for name, value in kwargs.items():  # noqa: SIM110 (a loop: no generator, hot path)
            if not _fast(self.hint_named(name), value):
                return False
        return True

    def bind(self, args: Sequence[object], kwargs: Mapping[str, object], *, what: str) -> None:
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):  # a callable without a signature: take anything
            return
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise PayloadError(
                f"the input of {what} does not fit its parameters ({exc}): it takes "
                f"{_shown(self.fn, signature)}"
            ) from None


def _shown(fn: Callable[..., object], signature: inspect.Signature) -> str:
    """`count_to(count: int, *chunks: bytes)`: the parameters as written, hints evaluated."""
    with contextlib.suppress(Exception):  # unresolvable forward references stay strings
        signature = inspect.signature(fn, eval_str=True)
    parameters = signature.replace(return_annotation=inspect.Signature.empty)
    return f"{getattr(fn, '__name__', 'it')}{parameters}"


def _element(rest: _Target, where: str) -> _Target:
    return _Target(rest.path + where, rest.hint, rest.noun, rest.annotation)


@functools.cache
def _parameters(fn: Callable[..., object]) -> _Parameters:
    hints = _hints(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to go by: any argument, no hints
        signature = inspect.Signature(
            [
                inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
            ]
        )
    positional: list[_Target] = []
    named: dict[str, _Target] = {}
    index: dict[str, int] = {}
    required: list[tuple[str | None, int]] = []
    rest_positional = rest_named = None
    for parameter in signature.parameters.values():
        name, kind = parameter.name, parameter.kind
        hint = hints.get(name, NO_HINT)
        hint = NO_HINT if hint is Any or hint is object else hint  # anything: plain JSON
        if kind is parameter.VAR_POSITIONAL:
            rest_positional = _Target(f"input.{name}", hint, f"*{name}", f"*{name}: {{}}")
            continue
        if kind is parameter.VAR_KEYWORD:
            rest_named = _Target(f"input.{name}", hint, f"**{name}", f"**{name}: {{}}")
            continue
        target = _Target(f"input.{name}", hint, f"the parameter {name!r}", f"{name}: {{}}")
        position = -1
        if kind is not parameter.KEYWORD_ONLY:
            position = len(positional)
            positional.append(target)
        if kind is not parameter.POSITIONAL_ONLY:
            named[name] = target
            if position >= 0:
                index[name] = position
        if parameter.default is parameter.empty:
            required.append((None if kind is parameter.POSITIONAL_ONLY else name, position))
    return _Parameters(
        fn,
        tuple(positional),
        named,
        index,
        tuple(required),
        rest_positional,
        rest_named,
        tuple(target.hint for target in positional),
        NO_HINT if rest_positional is None else rest_positional.hint,
    )


def _hints(fn: Callable[..., object]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to plain JSON
        return {}
