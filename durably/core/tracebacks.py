"""The traceback of an error the user's code raised, as durably records it with the attempt
that failed: the user's frames, without the engine's and the event loop's around them, and
bounded in size so that a deep recursion cannot bloat a run's history.

Written on the standard library's `traceback.TracebackException` (it already formats chained
causes and exception groups); what durably adds is which frames to leave out and the bound.
"""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

__all__ = ["MAX_TRACEBACK", "user_traceback"]

MAX_TRACEBACK = 8_000  # characters kept of one traceback: the end (where it was raised) first

_DURABLY = Path(__file__).resolve().parent.parent
# durably's own code that is user code all the same: the demo's workflows
_USER_CODE_IN_DURABLY = (_DURABLY / "demo",)
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
# where a step's call passes through the standard library on its way to the user's code
_PLUMBING = tuple(_STDLIB / name for name in ("asyncio", "threading.py", "concurrent"))


def user_traceback(error: BaseException, limit: int = MAX_TRACEBACK) -> str | None:
    """`error`'s traceback as text, the engine's frames left out, cut in the middle to
    `limit` characters; None when no frame of it is the user's (durably raised it: a
    timeout, a result that cannot be stored), as there is nothing in it for the user."""
    shown = traceback.TracebackException.from_exception(error)
    _leave_out_plumbing(shown, set())
    if not shown.stack:
        return None
    text = "".join(shown.format())
    if len(text) <= limit:
        return text
    cut = f"\n  ... ({len(text) - limit} characters left out) ...\n"
    head = limit // 4
    return text[:head] + cut + text[len(text) - (limit - head) :]


def _leave_out_plumbing(shown: traceback.TracebackException, seen: set[int]) -> None:
    if id(shown) in seen:  # a cycle of causes
        return
    seen.add(id(shown))
    frames = [frame for frame in shown.stack if not _is_plumbing(frame.filename)]
    if len(frames) < len(shown.stack):
        shown.stack = traceback.StackSummary.from_list(frames)
    for linked in (shown.__cause__, shown.__context__, *(shown.exceptions or ())):
        if linked is not None:
            _leave_out_plumbing(linked, seen)


def _is_plumbing(filename: str) -> bool:
    try:
        path = Path(filename).resolve()
    except (OSError, ValueError):  # "<string>", a name no file has
        return False
    if path.is_relative_to(_DURABLY):
        return not any(path.is_relative_to(user) for user in _USER_CODE_IN_DURABLY)
    return any(path.is_relative_to(place) for place in _PLUMBING)
