"""The rules for the names a person or program gives durably: a run's id, who acts (`by`),
a signal's name. Each is stored as text (PostgreSQL refuses a NUL byte in it, SQLite keeps
it) and shown in logs, tables and URLs, so each is refused at the door, with what is wrong,
unless it is a non-empty string of bounded length without control characters; a run's id also
may not hold "/", which no path of the API or the dashboard could name."""

from __future__ import annotations

import unicodedata

from durably.errors import PayloadError

__all__ = ["MAX_NAME", "NAME_PATTERN", "RUN_ID_PATTERN", "check_name", "check_run_id"]

MAX_NAME = 200  # characters: the API's paths take as many
# The same rules as regular expressions, for the API's schema (control characters: Cc)
NAME_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f]+$"
RUN_ID_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f/]+$"


def check_name(value: object, what: str) -> str:
    """`value`, if it is a non-empty string of at most MAX_NAME characters, none a control
    character (Unicode's Cc: NUL, newline, tab, escape, ...)."""
    if not isinstance(value, str) or not value:
        raise PayloadError(f"{what} must be a non-empty string, not {value!r}")
    if len(value) > MAX_NAME:
        raise PayloadError(
            f"{what} has at most {MAX_NAME} characters; this one has {len(value)}: "
            f"{value[:40]!r}..."
        )
    bad = next((char for char in value if unicodedata.category(char) == "Cc"), None)
    if bad is not None:
        raise PayloadError(
            f"{what} cannot hold a control character such as {bad!r} (a NUL byte, a newline, "
            f"a tab): {value!r}"
        )
    return value


def check_run_id(value: object) -> str:
    """A run's id as given to start it: a name, without "/"."""
    given = check_name(value, "a run's id")
    if "/" in given:
        raise PayloadError(
            f"a run's id cannot hold '/' ({given!r}): the API's and the dashboard's paths "
            "could not name the run. Use another character, such as ':' or '.'"
        )
    return given
