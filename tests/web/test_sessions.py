"""The dashboard's sessions, against the real server on both stores: a session made with a
token ends when the token is removed from the server's tokens (or its role changes)."""

from __future__ import annotations

import httpx

import durably
from durably.web.auth import Identity, Tokens, hash_token
from durably.web.sessions import COOKIE, Sessions

from .conftest import Keys, serving


def test_a_session_ends_when_its_token_is_removed(shop: durably.App, keys: Keys) -> None:
    with serving(shop, keys) as running, httpx.Client(base_url=running.url) as web:
        web.post("/login", data={"token": keys.write, "next": "/runs"})
        assert web.get("/runs").status_code == 200
    fewer = Keys(
        keys.write, keys.read, Tokens.parse(f"rita read {hash_token(keys.read)}", source="test")
    )
    sessions = Sessions(key=b"k" * 32)
    cookie = sessions.issue(Identity("erin", "write"))
    for tokens, shown in ((keys, 200), (fewer, 303)):
        with (
            serving(shop, tokens, sessions=sessions) as running,
            httpx.Client(base_url=running.url, cookies={COOKIE: cookie}) as web,
        ):
            assert web.get("/runs").status_code == shown  # 303: to the login page
