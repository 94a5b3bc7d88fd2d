"""Payloads encrypted at rest, as the real server shows them: a token whose role may see them
(`--payloads-for`, the write role by default) reads the values, any other reads
`encrypted (key k1)`, in every route that shows a payload, on both stores. An export keeps
what the reader may not see sealed, never a placeholder: imported into a store that holds the
key, it opens; a placeholder would import as another value."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import durably
from durably.codec.encryption import new_key
from durably.testing import FakeClock
from durably.web.access import PayloadsFor
from tests.web.conftest import Keys, Live, serving, settle
from tests.web.shop import Payments, make_shop

SECRET = "o-SECRET-4111"
_ROUTES = (f"/api/runs/{SECRET}", f"/api/runs/{SECRET}/history", f"/api/runs/{SECRET}/export")


@pytest.fixture
def sealed_shop(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[durably.App]:
    monkeypatch.setenv("DURABLY_KEYS", f"k1:{new_key()}")
    app = make_shop(store_url, Payments(), clock=clock)
    app.start("checkout", SECRET, 120, id=SECRET)
    settle(app, SECRET)
    yield app
    app.close()


def pages(live: Live, token: str) -> list[str]:
    with httpx.Client(base_url=live.url, headers=live.headers(token)) as web:
        answers = [web.get(route) for route in (*_ROUTES, "/api/runs")]
    assert [answer.status_code for answer in answers] == [200] * len(answers)
    return [answer.text for answer in answers]


@pytest.mark.parametrize(
    ("payloads_for", "writer_sees", "reader_sees"),
    [("write", True, False), ("read", True, True), ("none", False, False)],
)
def test_each_role_sees_payloads_only_if_the_server_lets_it(
    sealed_shop: durably.App,
    keys: Keys,
    payloads_for: PayloadsFor,
    writer_sees: bool,
    reader_sees: bool,
) -> None:
    with serving(sealed_shop, keys, payloads_for=payloads_for) as live:
        for token, sees in ((keys.write, writer_sees), (keys.read, reader_sees)):
            for text in pages(live, token):
                secret_shown = f"ch-{SECRET}" in text or f'"{SECRET}",120' in text
                masked_shown = "encrypted (key k1)" in text or (
                    '"format":"durably.run/1"' in text and "durably-sealed:k1:" in text
                )
                assert (secret_shown, masked_shown) == (sees, not sees), text[:300]
