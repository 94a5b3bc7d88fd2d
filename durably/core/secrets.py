"""Redaction: values that are secrets are never shown. A value is a secret when it sits under a
key whose name says so (password, api_key, card_number, ...: `SECRET_NAMES`, and the names an
app adds with App(redact=) or $DURABLY_REDACT), or when the codec stored it marked, as
`{"$secret": value}` (a parameter or return value typed `durably.Secret[...]`).

What is stored stays as it was given (replay needs it); what is shown (runs show, the API,
the dashboard, logs, error messages) goes through `redact`. Errors' messages and tracebacks
have the secrets of the step's input and the run's input taken out before they are recorded
(`scrub`): a secret an exception repeats is recorded as `[redacted]`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, get_origin

__all__ = [
    "REDACTED",
    "SECRET_NAMES",
    "WRAPPER",
    "Secret",
    "SecretHint",
    "add_names",
    "is_secret_name",
    "redact",
    "redact_text",
    "scrub",
    "secret_hint",
    "secrets_in",
    "secrets_in_text",
]

REDACTED = "[redacted]"
WRAPPER = "$secret"  # the key of a value the codec stored marked secret
ENV = "DURABLY_REDACT"  # more names, comma-separated, for processes without the app (the CLI)
# Names (of fields, keys, parameters) whose values are secrets, in snake case. A name matches
# when its last words are one of these: `db_password`, `stripeApiKey`, `card-number`.
SECRET_NAMES = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "api_key",
        "apikey",
        "access_key",
        "private_key",
        "authorization",
        "cookie",
        "card_number",
        "cardnumber",
        "cvv",
        "cvc",
        "pin",
        "ssn",
        "iban",
    }
)
_names: set[str] = set(SECRET_NAMES)
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SHORTEST = 4  # a secret value shorter than this is not scrubbed from messages: too common


class _Marked:
    """The mark `Secret[T]` leaves in `Annotated[T, ...]`."""

    def __repr__(self) -> str:
        return "durably.Secret"


_MARK = _Marked()


class Secret:
    """`Secret[str]`: a parameter or return value (of a workflow or a step) that is a secret.
    It is stored marked (as `{"$secret": value}`), so that every place that shows it (runs
    show, the API, the dashboard, logs) shows `[redacted]` instead, without the code; your
    code gets the plain value. For fields inside a dataclass or model, use a secret name
    (`card_number`, `api_key`, ...) or App(redact=[...])."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[item, _MARK]


@dataclass(frozen=True, slots=True)
class SecretHint:
    """The codec's form of a `Secret[T]` hint: the type `inner` itself, stored marked."""

    inner: Any


def secret_hint(hint: Any) -> SecretHint | None:
    """`hint` (as typing.get_type_hints(..., include_extras=True) gives it) as a SecretHint if
    it is `Secret[T]`; else None."""
    if get_origin(hint) is Annotated and any(mark is _MARK for mark in hint.__metadata__):
        return SecretHint(hint.__origin__)
    return None


def add_names(names: Iterable[str]) -> None:
    """Treat values under these names as secrets too, in this process (App(redact=))."""
    for name in names:
        _names.add(_snake(name))


def _snake(name: str) -> str:
    return "_".join(word.lower() for word in _WORDS.findall(name))


def _from_environment() -> None:
    add_names(name for name in os.environ.get(ENV, "").split(",") if name.strip())


def is_secret_name(name: object) -> bool:
    """Whether a value under this key or parameter name is a secret."""
    if not isinstance(name, str):
        return False
    words = [word.lower() for word in _WORDS.findall(name)]
    return any("_".join(words[-count:]) in _names for count in (1, 2, 3) if count <= len(words))


def redact(value: Any) -> Any:
    """`value` (plain JSON, read back) with every secret in it replaced by `[redacted]`."""
    if isinstance(value, dict):
        if len(value) == 1 and WRAPPER in value:
            return REDACTED
        return {
            key: REDACTED if is_secret_name(key) else redact(part) for key, part in value.items()
        }
    if isinstance(value, list):
        return [redact(part) for part in value]
    return value


def redact_text(text: str) -> str:
    """JSON text with its secrets replaced (compact JSON when anything was), those in JSON
    text held in its fields too (a signal's data in its event); text that is no JSON, as it
    is."""
    if not _may_hold_secret(text):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    redacted = redact(value)
    if isinstance(redacted, dict):
        redacted = {
            key: redact_text(part) if isinstance(part, str) else part
            for key, part in redacted.items()
        }
    return text if redacted == value else json.dumps(redacted, separators=(",", ":"))


def _may_hold_secret(text: str) -> bool:
    """A quick no for JSON text with no object key that could name a secret."""
    return '":' in text or '": ' in text


def secrets_in(value: Any) -> list[str]:
    """The secret values in `value` (plain JSON, read back), as text: what `scrub` takes out."""
    found: list[str] = []

    def collect(part: Any, secret: bool) -> None:
        if isinstance(part, dict):
            if len(part) == 1 and WRAPPER in part:
                collect(part[WRAPPER], True)
                return
            for key, item in part.items():
                collect(item, secret or is_secret_name(key))
        elif isinstance(part, list):
            for item in part:
                collect(item, secret)
        elif secret and part is not None and not isinstance(part, bool):
            text = part if isinstance(part, str) else json.dumps(part)
            if len(text) >= _SHORTEST and REDACTED not in text:  # not one taken out already
                found.append(text)

    collect(value, False)
    return found


def secrets_in_text(text: str | None) -> list[str]:
    """`secrets_in` of stored JSON text (none if it is no JSON)."""
    if not text or not _may_hold_secret(text):
        return []
    try:
        return secrets_in(json.loads(text))
    except ValueError:
        return []


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` (an error's message, a traceback) with each of `secrets` replaced, longest
    first (so that a secret containing another goes whole)."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


_from_environment()
