"""The dashboard's sessions, against the real server on both stores: a session made with a
token ends when the token is removed from the server's tokens (or its role changes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import durably
from durably.errors import ConfigError
from durably.web.auth import Identity, Tokens, hash_token, new_token
from durably.web.sessions import COOKIE, Sessions

from .conftest import Keys, Live, serving


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


def test_logging_out_ends_the_session_on_the_server_and_needs_the_csrf_token(
    live: Live,
) -> None:
    with httpx.Client(base_url=live.url, follow_redirects=False) as web:
        web.post("/login", data={"token": live.keys.write, "next": "/runs"})
        cookie = web.cookies[COOKIE]
        page = web.get("/runs").text
        [csrf] = re.findall(r'name="csrf" value="([^"]+)"', page)[:1]

        forged = web.post("/logout", data={})  # a page of another site cannot log you out
        assert forged.status_code == 303
        assert "refused=" in forged.headers["location"]
        assert web.get("/runs").status_code == 200  # still logged in

        out = web.post("/logout", data={"csrf": csrf})
        assert (out.status_code, out.headers["location"]) == (303, "/login")

    # a copy of the cookie, kept from before the logout, is refused from now on
    with httpx.Client(base_url=live.url, cookies={COOKIE: cookie}) as copied:
        assert copied.get("/runs", follow_redirects=False).status_code == 303  # to log in


def test_a_session_key_shorter_than_32_bytes_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match="has 16 bytes; a session key needs at least 32"):
        Sessions(key=b"k" * 16)
    monkeypatch.setenv("DURABLY_SESSION_KEY", "short")
    with pytest.raises(ConfigError, match=r"\$DURABLY_SESSION_KEY has 5 bytes"):
        Sessions()
    monkeypatch.setenv("DURABLY_SESSION_KEY", "k" * 32)
    assert Sessions().read(Sessions().issue(Identity("erin", "write"))) is not None


def test_a_token_revoked_in_the_file_is_refused_without_a_restart(
    shop: durably.App, tmp_path: Path
) -> None:
    write, read = new_token(), new_token()
    path = tmp_path / "tokens.txt"
    path.write_text(f"erin write {hash_token(write)}\nrita read {hash_token(read)}\n")
    keys = Keys(write, read, Tokens.load(str(path)))
    with serving(shop, keys) as running, httpx.Client(base_url=running.url) as web:
        bearer = {"Authorization": f"Bearer {write}"}
        assert web.get("/api/runs", headers=bearer).status_code == 200
        web.post("/login", data={"token": write, "next": "/runs"})
        assert web.get("/runs", follow_redirects=False).status_code == 200

        revoked = subprocess.run(
            [
                sys.executable,
                "-m",
                "durably",
                "token",
                "revoke",
                "erin",
                "--tokens-file",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert revoked.returncode == 0, revoked.stderr
        assert "rita read" in path.read_text()  # the others stay

        assert web.get("/api/runs", headers=bearer).status_code == 401  # at its next request
        assert web.get("/runs", follow_redirects=False).status_code == 303  # its session too
        rita = {"Authorization": f"Bearer {read}"}
        assert web.get("/api/runs", headers=rita).status_code == 200

        path.write_text("this is not a tokens file\n")  # a slip: the tokens it had stay
        assert web.get("/api/runs", headers=rita).status_code == 200

    again = revoke("nobody", path)
    assert again.returncode == 1
    assert again.stderr.startswith("error: the tokens file")


def revoke(name: str, path: Path) -> subprocess.CompletedProcess[str]:
    """`durably token revoke NAME --tokens-file PATH`, as a real process."""
    command = ["token", "revoke", name, "--tokens-file", str(path)]
    return subprocess.run(
        [sys.executable, "-m", "durably", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
