"""Who may call the API and use the dashboard: bearer tokens, kept only as their hashes.

A token is a random secret (`durably token new NAME` makes one and prints it once). The server
knows each by a line `NAME ROLE sha256:HEX`, from the file given to `--tokens-file` or from
$DURABLY_API_TOKENS (lines, or entries separated by `;`). ROLE is `write` (read and act) or
`read` (read only). The name is who acts: it is recorded in the history of every run the
token's holder steers.

Tokens are 32 random bytes, so one round of SHA-256 is enough to keep them unguessable from
their hashes (a slow password hash guards low-entropy secrets; these are not). Hashes are
compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from durably.errors import ConfigError

__all__ = ["ENV", "NAME", "Identity", "Tokens", "hash_token", "new_token"]

ENV = "DURABLY_API_TOKENS"
Role = Literal["read", "write"]
NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_LINE = re.compile(
    rf"^(?P<name>{NAME.pattern})\s+(?P<role>read|write)\s+sha256:(?P<hash>[0-9a-f]{{64}})$"
)


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    role: Role

    @property
    def can_write(self) -> bool:
        return self.role == "write"


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe."""
    return "dur_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """The tokens the server accepts, by hash."""

    def __init__(self, entries: Iterable[tuple[str, Role, str]]) -> None:
        self._entries = [(name, role, bytes.fromhex(digest)) for name, role, digest in entries]
        names = [name for name, _, _ in self._entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"a token name is given twice: {sorted(names)}")

    @classmethod
    def parse(cls, text: str, *, source: str) -> Tokens:
        """From lines `NAME ROLE sha256:HEX` (or `;`-separated entries); # starts a comment."""
        entries: list[tuple[str, Role, str]] = []
        for number, raw in enumerate(re.split(r"[\n;]", text), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            found = _LINE.match(line)
            if found is None:
                raise ConfigError(
                    f"{source}, entry {number}: {line[:40]!r} is not `NAME ROLE sha256:HEX` "
                    "(ROLE read or write; make one with `durably token new NAME`)"
                )
            role: Role = "write" if found["role"] == "write" else "read"
            entries.append((found["name"], role, found["hash"]))
        return cls(entries)

    @classmethod
    def load(cls, path: str | None = None) -> Tokens:
        """From `path`, else from $DURABLY_API_TOKENS, else none (every protected route is
        then refused, with a message that says how to make a token)."""
        if path is not None:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise ConfigError(f"cannot read the tokens file {path}: {exc.strerror}") from None
            return cls.parse(text, source=path)
        return cls.parse(os.environ.get(ENV, ""), source=f"${ENV}")

    def __len__(self) -> int:
        return len(self._entries)

    def knows(self, identity: Identity) -> bool:
        """Whether a token of this name and role is still configured (a session made with a
        token that was since removed, or whose role changed, is no longer anyone's)."""
        return any(n == identity.name and r == identity.role for n, r, _ in self._entries)

    def identify(self, token: str) -> Identity | None:
        """Whose token this is (None: nobody's)."""
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for name, role, known in self._entries:  # every entry compared: no early exit
            if hmac.compare_digest(digest, known):
                found = Identity(name, role)
        return found
