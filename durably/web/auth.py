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
import logging
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from durably.errors import ConfigError

log = logging.getLogger("durably.server")

__all__ = ["ENV", "NAME", "Identity", "Tokens", "hash_token", "new_token", "remove_token"]

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
    """The tokens the server accepts, by hash. Loaded from a file, they follow it: a change
    of the file (a token revoked, added, its role changed) holds from the next request on,
    without a restart; a file that no longer reads keeps the tokens it had, and says why."""

    def __init__(self, entries: Iterable[tuple[str, Role, str]]) -> None:
        self._entries = _entries(entries)
        self._path: Path | None = None
        self._seen: tuple[int, int, int] | None = None  # the file's inode, size, mtime

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
            tokens = cls.parse(_read(Path(path)), source=path)
            tokens._path, tokens._seen = Path(path), _stamp(Path(path))
            return tokens
        return cls.parse(os.environ.get(ENV, ""), source=f"${ENV}")

    def _follow(self) -> None:
        """Read the tokens file again if it changed since it was last read."""
        if self._path is None:
            return
        stamp = _stamp(self._path)
        if stamp == self._seen:
            return
        self._seen = stamp
        try:
            self._entries = Tokens.parse(_read(self._path), source=str(self._path))._entries
        except ConfigError as exc:
            log.error("the tokens file changed but cannot be used, so it is not: %s", exc)
        else:
            log.info("tokens file %s read again: %d token(s)", self._path, len(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def knows(self, identity: Identity) -> bool:
        """Whether a token of this name and role is still configured (a session made with a
        token that was since removed, or whose role changed, is no longer anyone's)."""
        self._follow()
        return any(n == identity.name and r == identity.role for n, r, _ in self._entries)

    def identify(self, token: str) -> Identity | None:
        """Whose token this is (None: nobody's)."""
        self._follow()
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for name, role, known in self._entries:  # every entry compared: no early exit
            if hmac.compare_digest(digest, known):
                found = Identity(name, role)
        return found


def _entries(given: Iterable[tuple[str, Role, str]]) -> list[tuple[str, Role, bytes]]:
    entries = [(name, role, bytes.fromhex(digest)) for name, role, digest in given]
    names = [name for name, _, _ in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"a token name is given twice: {sorted(names)}")
    return entries


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the tokens file {path}: {exc.strerror}") from None


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed file from the one read: its inode, size and time of change."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def remove_token(path: Path, name: str) -> bool:
    """Take NAME's line out of the tokens file at `path` (written whole, then renamed into
    place, so a server never reads half of it); whether it had one."""
    text = _read(path)
    kept, found = [], False
    for line in text.splitlines(keepends=True):
        entry = _LINE.match(line.split("#", 1)[0].strip())
        if entry is not None and entry["name"] == name:
            found = True
            continue
        kept.append(line)
    if found:
        fresh = path.with_name(f".{path.name}.{os.getpid()}")
        fresh.write_text("".join(kept))
        os.chmod(fresh, path.stat().st_mode & 0o777)
        os.replace(fresh, path)
    return found
