"""Fixtures of the security tests: the web tests' own (the shop app on each real store, its
tokens, and the real server serving it, on a loopback port), so that every check here is made
against the server as `durably server` runs it."""

from __future__ import annotations

from tests.web.conftest import Keys, Live, keys, live, payments, serving, shop

__all__ = ["Keys", "Live", "keys", "live", "payments", "serving", "shop"]
