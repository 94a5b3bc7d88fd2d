"""Payloads encrypted at rest: AES-256-GCM from `cryptography`, with a key id stored beside
each sealed value so that keys can be rotated.

A sealed value is text: `durably-sealed:<key id>:<nonce and ciphertext, base64url>`. It takes
the place of the JSON text it seals (a run's input, a step's result), or of a value inside an
event's JSON (a signal's data). No JSON text begins with `d`, so a reader can tell a sealed
value from a plain one, and values written before encryption was turned on stay readable.

The keys come from the environment: DURABLY_KEYS="k2:<base64 key>,k1:<base64 key>" or
DURABLY_KEYS_FILE=/path/to/keys (one `k2 <base64 key>` per line); the first key seals new
values, every key listed opens what it sealed. A key is 32 random bytes
(`durably keys new` prints one).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from durably.errors import ConfigError, PayloadError

__all__ = [
    "KEYS_ENV",
    "KEYS_FILE_ENV",
    "PREFIX",
    "Keyring",
    "masked",
    "new_key",
    "sealed_key",
]

KEYS_ENV = "DURABLY_KEYS"
KEYS_FILE_ENV = "DURABLY_KEYS_FILE"
PREFIX = "durably-sealed:"
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_NONCE = 12  # bytes: GCM's standard nonce, random for each value
_KEY_BYTES = 32  # AES-256


def sealed_key(text: object) -> str | None:
    """The id of the key that sealed `text`, or None if it is no sealed value."""
    if type(text) is not str or not text.startswith(PREFIX):
        return None
    return text[len(PREFIX) :].partition(":")[0]


def masked(text: str) -> str:
    """What a reader who may not see a sealed value is shown instead: `encrypted (key k2)`."""
    return f"encrypted (key {sealed_key(text)})"


def new_key() -> str:
    """A new key, 32 random bytes as base64: what DURABLY_KEYS takes after `<id>:`."""
    return base64.b64encode(secrets.token_bytes(_KEY_BYTES)).decode()


class Keyring:
    """The keys a process holds: the first seals, any of them opens what it sealed."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._refused = (InvalidTag, binascii.Error, ValueError)  # a value that does not open

        if not keys:
            raise ConfigError(f"{KEYS_ENV} names no key: give at least one `id:base64key`")
        self._ciphers: dict[str, Any] = {}
        for key_id, key in keys:
            if not _KEY_ID.match(key_id):
                raise ConfigError(
                    f"the key id {key_id!r} is not allowed: use 1 to 32 letters, digits, "
                    "'_', '-' or '.' (k1, 2026-11, ...)"
                )
            if len(key) != _KEY_BYTES:
                raise ConfigError(
                    f"the key {key_id!r} has {len(key)} bytes; AES-256 needs 32 "
                    "(make one with `durably keys new`)"
                )
            if key_id in self._ciphers:
                raise ConfigError(f"the key id {key_id!r} is given twice")
            self._ciphers[key_id] = AESGCM(key)
        self.current = keys[0][0]
        self._prefix = f"{PREFIX}{self.current}:"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._ciphers)

    def seal(self, text: str) -> str:
        """`text` encrypted with the current key, as a sealed value."""
        nonce = secrets.token_bytes(_NONCE)
        sealed = self._ciphers[self.current].encrypt(nonce, text.encode(), self._prefix.encode())
        return self._prefix + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, text: str) -> str:
        """The text a sealed value holds (a value that is not sealed is returned as it is).
        PayloadError if this keyring lacks its key, or if it was changed after sealing."""
        key_id = sealed_key(text)
        if key_id is None:
            return text
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadError(
                f"a stored value is encrypted with the key {key_id!r}, which this process does "
                f"not hold (it holds {', '.join(self._ciphers)}): add it to {KEYS_ENV} or "
                f"{KEYS_FILE_ENV} (keep old keys until `durably keys rotate` has run)"
            )
        head = f"{PREFIX}{key_id}:"
        try:
            raw = base64.urlsafe_b64decode(text[len(head) :])
            return str(cipher.decrypt(raw[:_NONCE], raw[_NONCE:], head.encode()).decode())
        except self._refused:
            raise PayloadError(
                f"a stored value encrypted with the key {key_id!r} does not open with it: the "
                "value was changed in the database, or the key is not the one that sealed it"
            ) from None

    def is_current(self, text: str) -> bool:
        """Whether `text` is sealed with the current key (nothing to rotate)."""
        return text.startswith(self._prefix)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring DURABLY_KEYS or DURABLY_KEYS_FILE give; None if neither is set."""
        environ = os.environ if environ is None else environ
        given, path = environ.get(KEYS_ENV, "").strip(), environ.get(KEYS_FILE_ENV, "").strip()
        if given and path:
            raise ConfigError(f"set {KEYS_ENV} or {KEYS_FILE_ENV}, not both")
        if path:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise ConfigError(f"{KEYS_FILE_ENV}={path} cannot be read: {exc}") from None
            lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
            return cls.parse([line for line in lines if line], where=f"{KEYS_FILE_ENV}={path}")
        if given:
            return cls.parse(re.split(r"[,\s]+", given), where=KEYS_ENV)
        return None

    @classmethod
    def parse(cls, entries: Sequence[str], *, where: str) -> Keyring:
        """Keys written `id:base64` or `id base64`, the current one first."""
        try:
            import cryptography  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"{where} asks for encrypted payloads, which need the `cryptography` package: "
                "pip install 'durably[encryption]'"
            ) from None
        keys: list[tuple[str, bytes]] = []
        for entry in entries:
            parts = re.split(r"[:\s]+", entry.strip(), maxsplit=1)
            if len(parts) != 2:
                raise ConfigError(
                    f"{where} holds {entry!r}, which is no key: write each as id:base64key "
                    "(make one with `durably keys new`)"
                )
            keys.append((parts[0], _decoded(parts[0], parts[1].strip(), where)))
        return cls(keys)


def _decoded(key_id: str, encoded: str, where: str) -> bytes:
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ConfigError(
            f"the key {key_id!r} in {where} is not base64 (make one with `durably keys new`)"
        ) from None
