"""The traceback recorded with an error the user's code raised: the user's frames without the
engine's, bounded in size, kept out when no frame is the user's, and a secret hidden."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import durably
from durably.core.event_data import encode_payload, payload_of
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import StepFailed
from durably.core.tracebacks import user_traceback
from durably.testing import FakeClock

ENGINE_FILE = str(Path(durably.__file__).parent / "runtime" / "calling.py")


def _engine(source: str) -> dict[str, Any]:
    """Functions compiled as if they were the engine's code."""
    namespace: dict[str, Any] = {}
    exec(compile(source, ENGINE_FILE, "exec"), namespace)
    return namespace


# how the engine calls user code: it catches what the body raises
_CALLING = _engine(
    "def call(body):\n"
    "    try:\n"
    "        body()\n"
    "    except BaseException as exc:\n"
    "        return exc\n"
    "def timeout():\n"
    "    raise TimeoutError('late')\n"
)


def raised(body: Callable[[], Any]) -> BaseException:
    """What `body` raised, caught by the engine as a step's error is."""
    error: BaseException | None = _CALLING["call"](body)
    assert error is not None, "it did not raise"
    return error


def user_helper() -> None:
    raise KeyError("sku-404")


def test_the_users_frames_are_kept_and_the_engines_left_out() -> None:
    text = user_traceback(raised(user_helper))

    assert text is not None
    assert text.startswith("Traceback (most recent call last):")
    assert f'File "{__file__}"' in text
    assert "in user_helper" in text
    assert 'raise KeyError("sku-404")' in text
    assert text.rstrip().endswith("KeyError: 'sku-404'")
    assert "calling.py" not in text


def test_an_error_with_no_frame_of_the_users_has_no_traceback() -> None:
    assert user_traceback(raised(_CALLING["timeout"])) is None
    assert ErrorInfo.raised(TimeoutError("never raised")).traceback is None


def test_a_cause_is_shown_with_its_own_frames_also_without_the_engines() -> None:
    def wrapping() -> None:
        try:
            user_helper()
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc

    text = user_traceback(raised(wrapping))

    assert text is not None
    assert "The above exception was the direct cause" in text
    assert "in user_helper" in text
    assert "in wrapping" in text
    assert "calling.py" not in text


def test_a_deep_traceback_is_cut_in_the_middle_to_its_bound() -> None:
    # 60 distinct functions, each calling the next (the standard library folds repeats)
    source = "".join(f"def f{n}():\n    f{n + 1}()\n" for n in range(60))
    namespace: dict[str, Any] = {}
    exec(
        compile(source + "def f60():\n    raise ValueError('at the bottom')\n", "deep.py", "exec"),
        namespace,
    )
    deep = namespace["f0"]

    error = raised(deep)
    whole = user_traceback(error, limit=10**9)
    text = user_traceback(error, limit=2_000)

    assert whole is not None
    assert text is not None
    assert len(whole) > 2_000
    cut = f"({len(whole) - 2_000} characters left out)"
    assert cut in text
    assert len(text) == 2_000 + len(f"\n  ... {cut} ...\n")
    assert text.startswith("Traceback (most recent call last):")
    assert text.rstrip().endswith("ValueError: at the bottom")


def test_a_secret_is_hidden_in_the_message_and_the_traceback() -> None:
    def leaky() -> None:
        token = "tok_" + "s3cr3t"
        raise PermissionError(f"refused {token}")

    info = ErrorInfo.raised(raised(leaky), hide="tok_s3cr3t")

    assert info.message == "refused [redacted]"
    assert info.traceback is not None
    assert "tok_s3cr3t" not in info.traceback
    assert "PermissionError: refused [redacted]" in info.traceback


def test_the_traceback_is_stored_with_the_error_and_read_back() -> None:
    info = ErrorInfo.raised(raised(user_helper))
    event = Event(1, EventKind.STEP_FAILED, FakeClock().now(), 0, "charge", 1, "")
    stored = encode_payload(StepFailed(info, "terminal", 1))
    read = payload_of(replace(event, data=stored))

    assert json.loads(stored)["traceback"] == info.traceback
    assert isinstance(read, StepFailed)
    assert read.error.traceback == info.traceback
    assert read.error == ErrorInfo(info.error_class, info.message)  # equal without it
    old = encode_payload(StepFailed(ErrorInfo("KeyError", "'x'"), "terminal", 1))
    assert "traceback" not in json.loads(old)  # left out when there is none, as before
    decoded = payload_of(replace(event, data=old))
    assert isinstance(decoded, StepFailed)
    assert decoded.error.traceback is None


def test_report_puts_the_traceback_under_class_and_message() -> None:
    assert ErrorInfo("KeyError", "'x'").report() == "KeyError: 'x'"
    info = ErrorInfo("KeyError", "'x'", "Traceback ...\nKeyError: 'x'\n")
    assert info.report() == "KeyError: 'x'\nTraceback ...\nKeyError: 'x'"
