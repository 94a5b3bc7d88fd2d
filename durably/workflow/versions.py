"""Workflow versions: what a run is pinned to when it starts, so that only workers with the
same code (or code declared compatible) ever run it.

A workflow's version is the one its decorator names (`@app.workflow(version="2025-06-a")`),
or by default a short hash of its code: the function's source, read as tokens (so comments,
blank lines and indentation do not count, and Python versions agree), and the registered
names of the steps and workflows it refers to (renaming a step changes what its history
records). A change of either is a new version; `versions=` on the decorator lists older ones
this code can still run (a change made compatible with `durably.patched`).

Written by hand: no library hashes a function's code in a way that stays the same across
Python versions (bytecode does not; the AST's dump gained fields in 3.12).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import textwrap
import tokenize
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["code_version", "source_tokens"]

_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
_DIGITS = 12  # of the SHA-256, in hex: 48 bits, plenty to tell a workflow's versions apart


def code_version(
    fn: Callable[..., Any],
    names: Callable[[object], str | None],
    *,
    tokens: Sequence[str] | None = None,
) -> str:
    """The default version of the workflow `fn`. `names(obj)`: the registered name of a step
    or workflow object the code refers to (None for anything else). `tokens`: its source's,
    read when the code was loaded (`source_tokens`); read now if not given."""
    digest = hashlib.sha256()
    for part in source_tokens(fn) if tokens is None else tokens:
        digest.update(part.encode())
        digest.update(b"\0")
    for referred in sorted(_referred(fn, names)):
        digest.update(b"\1" + referred.encode())
    return digest.hexdigest()[:_DIGITS]


def source_tokens(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The text of `fn`'s source tokens, read from its file now. Read them when the code is
    loaded (by the decorator): the file may be rewritten later (a deploy) under a process
    that still runs the code it imported, whose version must be that code's."""
    return tuple(_source_tokens(fn))


def _source_tokens(fn: Callable[..., Any]) -> Iterator[str]:
    """The function's source as its tokens' text; its bytecode if the source is not there
    (a function made at run time): stable for one Python version only."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (OSError, TypeError, tokenize.TokenError, IndentationError):
        code = getattr(fn, "__code__", None)
        yield repr(code.co_code if code else fn)
        yield repr(code.co_consts if code else ())
        return
    yield from _joined(tokens, source.splitlines(keepends=True))


_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12 and later
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _joined(tokens: list[tokenize.TokenInfo], lines: list[str]) -> Iterator[str]:
    """The tokens' text, an f-string whole as its source reads (Python 3.12 splits it into
    several tokens where 3.11 has one: both give the same text)."""
    depth, start = 0, (0, 0)
    for token in tokens:
        if token.type == _FSTRING_START:
            depth, start = depth + 1, (token.start if depth == 0 else start)
            continue
        if depth:
            if token.type == _FSTRING_END:
                depth -= 1
                if depth == 0:
                    yield _text(lines, start, token.end)
            continue
        if token.type not in _SKIPPED:
            yield token.string


def _text(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source from `start` to `end` (tokenize's (row from 1, column) positions)."""
    (first, column), (last, stop) = start, end
    if first == last:
        return lines[first - 1][column:stop]
    middle = "".join(lines[first : last - 1])
    return lines[first - 1][column:] + middle + lines[last - 1][:stop]


def _referred(fn: Callable[..., Any], names: Callable[[object], str | None]) -> set[str]:
    """The registered names of the steps and workflows the code refers to, by a global name
    or a variable of an enclosing function (a workflow defined where its steps are)."""
    code = getattr(fn, "__code__", None)
    scope: dict[str, Any] = dict(getattr(fn, "__globals__", {}))
    cells = getattr(fn, "__closure__", None) or ()
    for name, cell in zip(code.co_freevars if code else (), cells, strict=False):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    found: set[str] = set()
    for name in _global_names(code):
        registered = names(scope.get(name))
        if registered is not None:
            found.add(f"{name}={registered}")
    return found


def _global_names(code: types.CodeType | None) -> Iterator[str]:
    if code is None:
        return
    yield from code.co_names
    yield from code.co_freevars
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):  # a nested function or comprehension
            yield from _global_names(constant)
