"""The contract suite runs on each store as it is, and wrapped in an EncryptedStore (payloads
sealed at rest, durably.stores.encrypted): encryption keeps every promise of the protocol."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from durably.codec.encryption import Keyring, new_key
from durably.stores import Store, open_store


@pytest.fixture(params=["plain", "encrypted"])
def store(store_url: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    keys = None
    if request.param == "encrypted":
        keys = Keyring.parse([f"k1:{new_key()}"], where="the contract suite")
    opened = open_store(store_url, keys=keys)
    yield opened
    opened.close()


@pytest.fixture
def other(store_url: str) -> Iterator[Store]:
    """A second store on the same database, as another process would open it (plain)."""
    opened = open_store(store_url)
    yield opened
    opened.close()
