"""The dashboard's sessions and CSRF tokens: a person logs in with an API token once; the
server then keeps who they are in a cookie it signed, and every form carries a CSRF token
derived from that session.

Written here rather than taken from Starlette's SessionMiddleware: that one needs itsdangerous
and keeps a whole dict; a session here is a name, a role and an expiry, signed with HMAC-SHA256
under a key of the server's (random per start unless $DURABLY_SESSION_KEY gives one, so that
several servers behind a balancer accept each other's cookies).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time

from durably.errors import ConfigError
from durably.web.auth import Identity

__all__ = ["COOKIE", "KEY_ENV", "Sessions"]

COOKIE = "durably_session"
KEY_ENV = "DURABLY_SESSION_KEY"
_LIFETIME = 12 * 3600.0
_KEY_BYTES = 32  # HMAC-SHA256's own size: a shorter key is easier to guess than the hash


class Sessions:
    """Issues, reads and ends sessions. An ended session (a logout) is remembered until it
    would have expired, so that a copy of its cookie is refused from then on; by this server
    process (several servers behind a balancer each know their own logouts)."""

    def __init__(self, key: bytes | None = None, lifetime: float = _LIFETIME) -> None:
        given = os.environ.get(KEY_ENV)
        self._key = key or (given.encode() if given else secrets.token_bytes(_KEY_BYTES))
        if len(self._key) < _KEY_BYTES:
            where = f"${KEY_ENV}" if key is None else "the session key"
            raise ConfigError(
                f"{where} has {len(self._key)} bytes; a session key needs at least "
                f"{_KEY_BYTES} (make one: python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        self._lifetime = lifetime
        self._ended: dict[str, int] = {}  # session id -> its expiry

    def issue(self, identity: Identity) -> str:
        """A cookie value for `identity`, valid for the session's lifetime."""
        expiry = int(time.time() + self._lifetime)
        session = secrets.token_urlsafe(12)
        body = f"{identity.name}|{identity.role}|{expiry}|{session}"
        return _b64(body.encode()) + "." + _b64(self._sign(body))

    def end(self, cookie: str | None) -> None:
        """Log the session out: its cookie is refused from now on, wherever it is kept."""
        found = self._parse(cookie)
        if found is not None:
            session, expiry = found[3], found[2]
            now = time.time()
            self._ended = {s: e for s, e in self._ended.items() if e >= now}  # forget old
            self._ended[session] = expiry

    def read(self, cookie: str | None) -> Identity | None:
        """Whose session this cookie is (None: none, forged, expired or logged out)."""
        found = self._parse(cookie)
        if found is None:
            return None
        name, role, expiry, session = found
        if expiry < time.time() or session in self._ended:
            return None
        return Identity(name, "write" if role == "write" else "read")

    def _parse(self, cookie: str | None) -> tuple[str, str, int, str] | None:
        """The name, role, expiry and session id a cookie this server signed holds."""
        if not cookie or "." not in cookie:
            return None
        encoded, _, signature = cookie.partition(".")
        try:
            body = _unb64(encoded).decode()
            valid = hmac.compare_digest(_unb64(signature), self._sign(body))
        except (ValueError, UnicodeDecodeError):
            return None
        parts = body.split("|")
        if not valid or len(parts) != 4:
            return None
        name, role, expiry, session = parts
        if role not in ("read", "write") or not expiry.isdigit():
            return None
        return name, role, int(expiry), session

    def csrf(self, cookie: str) -> str:
        """The CSRF token of the session `cookie`: every form posts it back."""
        return _b64(self._sign("csrf:" + cookie))

    def check_csrf(self, cookie: str | None, token: str | None) -> bool:
        return bool(cookie and token) and hmac.compare_digest(self.csrf(cookie or ""), token or "")

    def _sign(self, text: str) -> bytes:
        return hmac.new(self._key, text.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
