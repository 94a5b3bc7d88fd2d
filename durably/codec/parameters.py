"""A function's parameters as the codec reads them: the hint and the path in messages of each
argument's value (by position and by name), which of them are typed `durably.Secret[...]`,
and the quick checks the hot path makes of a call before it is encoded
(durably.codec.encoding)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from durably.codec.roundtrip import PLAIN_SCALARS, is_plain
from durably.core.secrets import WRAPPER, secret_hint
from durably.errors import PayloadError

__all__ = [
    "NO_HINT",
    "Parameters",
    "Target",
    "hints_of",
    "is_fast",
    "marked_hints",
    "parameters_of",
    "unmarked",
]

NO_HINT: Any = object()  # "no type hint": values stay plain JSON


class Target(NamedTuple):  # not a frozen dataclass: made per typed value, and faster so
    """Where a value goes: its path in messages, and the hint it is read back with."""

    path: str  # "result", "input.order", "input.lines[2]"
    hint: Any
    noun: str = "the return type"  # what to annotate
    annotation: str = "-> {}"  # how, with the suggested hint in {}
    secret: bool = False  # typed durably.Secret[...]: stored marked, {"$secret": value}


def is_fast(hint: Any, value: object) -> bool:
    """True if `value` reads back unchanged without looking: plain JSON, and a hint that
    leaves plain JSON as it is (none, Any, or exactly the value's own type)."""
    return (hint is NO_HINT or hint is type(value) or hint is Any) and is_plain(value)


def unmarked(raw: Any) -> Any:
    """A marked value, read back, as the value itself (one stored unmarked: as it is)."""
    if type(raw) is dict and len(raw) == 1 and WRAPPER in raw:
        return raw[WRAPPER]
    return raw


def marked_hints(fn: Callable[..., object]) -> dict[str, Any]:
    """Hints with their Annotated extras (where Secret[T] leaves its mark)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return {}


@dataclass(frozen=True, slots=True)
class Parameters:
    """A function's parameters as the codec needs them: the hint and the path of the value
    each argument position or name goes to, and what a call must pass."""

    fn: Callable[..., object]
    positional: tuple[Target, ...]  # parameters that can be passed by position, in order
    named: dict[str, Target]  # parameters that can be passed by name
    index: dict[str, int]  # the position of each parameter that can be passed both ways
    required: tuple[tuple[str | None, int], ...]  # (name if nameable, position or -1)
    rest_positional: Target | None  # *args: the hint of each element
    rest_named: Target | None  # **kwargs
    hints: tuple[Any, ...]  # the hints of `positional`, for the hot path
    rest_hint: Any  # the hint of *args' elements (NO_HINT if none)
    secrets: bool = False  # some parameter is typed Secret[...]: stored marked

    def marked(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> tuple[list[object], dict[str, object]]:
        """The arguments as stored: those typed Secret[...] as `{"$secret": value}`."""
        return (
            [{WRAPPER: v} if self.target_at(i).secret else v for i, v in enumerate(args)],
            {k: {WRAPPER: v} if self.target_named(k).secret else v for k, v in kwargs.items()},
        )

    def unmarked(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> tuple[list[object], dict[str, object]]:
        """Stored arguments as given: those typed Secret[...] without their mark."""
        return (
            [unmarked(v) if self.target_at(i).secret else v for i, v in enumerate(args)],
            {k: unmarked(v) if self.target_named(k).secret else v for k, v in kwargs.items()},
        )

    def hint_at(self, position: int) -> Any:
        if position < len(self.positional):
            return self.positional[position].hint
        return NO_HINT if self.rest_positional is None else self.rest_positional.hint

    def hint_named(self, name: str) -> Any:
        target = self.named.get(name, self.rest_named)
        return NO_HINT if target is None else target.hint

    def target_at(self, position: int) -> Target:
        if position < len(self.positional):
            return self.positional[position]
        rest = self.rest_positional or Target("input.args", NO_HINT, "*args", "*args: {}")
        return _element(rest, f"[{position - len(self.positional)}]")

    def target_named(self, name: str) -> Target:
        if name in self.named:
            return self.named[name]
        rest = self.rest_named or Target("input.kwargs", NO_HINT, "**kwargs", "**kwargs: {}")
        return _element(rest, f'["{name}"]')

    def targets(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> list[tuple[Target, object]]:
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
            if not is_fast(self.hint_named(name), value):
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


def _element(rest: Target, where: str) -> Target:
    return Target(rest.path + where, rest.hint, rest.noun, rest.annotation, rest.secret)


@functools.cache
def parameters_of(fn: Callable[..., object]) -> Parameters:
    hints = hints_of(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to go by: any argument, no hints
        signature = inspect.Signature(
            [
                inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
            ]
        )
    marked = {name for name, hint in marked_hints(fn).items() if secret_hint(hint) is not None}
    positional: list[Target] = []
    named: dict[str, Target] = {}
    index: dict[str, int] = {}
    required: list[tuple[str | None, int]] = []
    rest_positional = rest_named = None
    for parameter in signature.parameters.values():
        name, kind = parameter.name, parameter.kind
        hint = hints.get(name, NO_HINT)
        hint = NO_HINT if hint is Any or hint is object else hint  # anything: plain JSON
        secret = name in marked
        if kind is parameter.VAR_POSITIONAL:
            rest_positional = Target(f"input.{name}", hint, f"*{name}", f"*{name}: {{}}", secret)
            continue
        if kind is parameter.VAR_KEYWORD:
            rest_named = Target(f"input.{name}", hint, f"**{name}", f"**{name}: {{}}", secret)
            continue
        noun = f"the parameter {name!r}"
        target = Target(f"input.{name}", hint, noun, f"{name}: {{}}", secret)
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
    return Parameters(
        fn,
        tuple(positional),
        named,
        index,
        tuple(required),
        rest_positional,
        rest_named,
        tuple(target.hint for target in positional),
        NO_HINT if rest_positional is None else rest_positional.hint,
        bool(marked - {"return"}),
    )


def hints_of(fn: Callable[..., object]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to plain JSON
        return {}
