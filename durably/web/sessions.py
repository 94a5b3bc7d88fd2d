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

from durably.web.auth import Identity

__all__ = ["COOKIE", "KEY_ENV", "Sessions"]

COOKIE = "durably_session"
KEY_ENV = "DURABLY_SESSION_KEY"
_LIFETIME = 12 * 3600.0


class Sessions:
    def __init__(self, key: bytes | None = None, lifetime: float = _LIFETIME) -> None:
        given = os.environ.get(KEY_ENV)
        self._key = key or (given.encode() if given else secrets.token_bytes(32))
        self._lifetime = lifetime

    def issue(self, identity: Identity) -> str:
        """A cookie value for `identity`, valid for the session's lifetime."""
        expiry = int(time.time() + self._lifetime)
        body = f"{identity.name}|{identity.role}|{expiry}"
        return _b64(body.encode()) + "." + _b64(self._sign(body))

    def read(self, cookie: str | None) -> Identity | None:
        """Whose session this cookie is (None: none, forged or expired)."""
        if not cookie or "." not in cookie:
            return None
        encoded, _, signature = cookie.partition(".")
        try:
            body = _unb64(encoded).decode()
            valid = hmac.compare_digest(_unb64(signature), self._sign(body))
        except (ValueError, UnicodeDecodeError):
            return None
        name, _, rest = body.partition("|")
        role, _, expiry = rest.partition("|")
        if not valid or role not in ("read", "write") or not expiry.isdigit():
            return None
        if int(expiry) < time.time():
            return None
        return Identity(name, "write" if role == "write" else "read")

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
