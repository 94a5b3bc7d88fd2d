"""Custom attributes: short strings a start records with its run (`customer="42"`,
`plan="pro"`), to find its runs by (`runs(attributes={"customer": "42"})`, `durably runs list
--attr customer=42`, `GET /api/runs?attr=customer:42`).

Attributes are for searching, so they are stored in the clear, even in a store whose
payloads are encrypted, and shown to everyone who may read runs. A name that durably's
redaction treats as a secret's (password, api_key, card_number, ...: durably.core.secrets) is
refused rather than stored where it would be read: a secret belongs in the input, typed
`durably.Secret[...]`.

A name is a name (durably.core.names) without ':' or '=', so that `name:value` and
`name=value` always part where the name ends; a value is a non-empty string of at most
MAX_VALUE characters, without control characters. A run has at most MAX_ATTRIBUTES.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from durably.core.names import MAX_NAME, check_name
from durably.core.secrets import is_secret_name
from durably.errors import PayloadError

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_VALUE",
    "SEPARATORS",
    "attributes_of",
    "check_attributes",
    "check_wanted",
]

MAX_ATTRIBUTES = 20  # of a run, and of a search (each is one more look-up in the index)
MAX_VALUE = MAX_NAME  # characters: a value is checked as a name is
SEPARATORS = ":="  # between a name and its value, written as text


def check_attributes(given: object) -> dict[str, str]:
    """The attributes a start records, as given: a mapping of names to values, each checked
    (PayloadError naming what is wrong), none a secret's name."""
    checked = _checked(given, "attributes")
    for name in checked:
        if is_secret_name(name):
            raise PayloadError(
                f"the attribute name {name!r} looks like a secret's (durably redacts values "
                "under it), and attributes are stored unencrypted, in the clear, to be "
                "searched: pass the secret in the workflow's input (typed durably.Secret[str]) "
                "and give the attribute another name"
            )
    return checked


def check_wanted(given: object) -> dict[str, str]:
    """The attributes a search asks for (a run must have each of them), checked like those
    of a start; a secret's name is let through: no run has one, so none is found."""
    return _checked(given, "the attributes to look for")


def attributes_of(pairs: Iterable[str], what: str) -> dict[str, str]:
    """`name=value` (or `name:value`) texts, as a person writes them on a command line or in
    a URL, as attributes; PayloadError, naming `what` (the option or parameter), for a text
    without a separator, or a name given twice."""
    found: dict[str, str] = {}
    for pair in pairs:
        cut = min((pair.find(mark) for mark in SEPARATORS if mark in pair), default=-1)
        if cut < 0:
            raise PayloadError(
                f"{what} {pair!r} is not an attribute: write name=value (or name:value), "
                "e.g. customer=42"
            )
        name, value = pair[:cut], pair[cut + 1 :]
        if name in found:
            raise PayloadError(f"{what} names the attribute {name!r} twice: give it once")
        found[name] = value
    return found


def _checked(given: object, what: str) -> dict[str, str]:
    if not isinstance(given, Mapping):
        raise PayloadError(
            f"{what} must be a mapping of names to strings, e.g. {{'customer': '42'}}, not "
            f"{given!r}"
        )
    if len(given) > MAX_ATTRIBUTES:
        raise PayloadError(
            f"{what} hold at most {MAX_ATTRIBUTES} names; these hold {len(given)}: keep the "
            "ones runs are searched by, and put the rest in the input"
        )
    return {_name(name): _value(name, value) for name, value in given.items()}


def _name(name: object) -> str:
    checked = check_name(name, "an attribute's name")
    bad = next((mark for mark in SEPARATORS if mark in checked), None)
    if bad is not None:
        raise PayloadError(
            f"an attribute's name cannot hold {bad!r} ({checked!r}): searches write "
            "name=value and name:value, and part them where the name ends"
        )
    return checked


def _value(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise PayloadError(
            f"the value of the attribute {name!r} must be a string, not {value!r}: write "
            f"{str(value)!r} if that is what you mean"
        )
    return check_name(value, f"the value of the attribute {name!r}")
