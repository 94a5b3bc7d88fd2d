"""What every route of the server shares: the durably app it serves (its client, clock and
store) and who is asking. API callers send `Authorization: Bearer TOKEN`; the dashboard's
people log in with a token once and carry a signed session cookie (durably.web.sessions)."""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request

from durably.app import App
from durably.client.client import Client
from durably.core.audit import Via
from durably.stores.encrypted import EncryptedStore
from durably.web.auth import ENV, Identity, Tokens
from durably.web.lockouts import Lockouts
from durably.web.sessions import Sessions

__all__ = [
    "Auditor",
    "PayloadsFor",
    "Reader",
    "Served",
    "Writer",
    "client_address",
    "count_failure",
    "locked_out",
    "lockout_message",
    "primary",
    "served",
]

log = logging.getLogger("durably.server")

_ANONYMOUS = Identity("anonymous", "read")


# Who sees payloads encrypted at rest (durably serve --payloads-for): tokens of the write role,
# tokens of either role, or nobody (every reader sees `encrypted (key k2)`)
PayloadsFor = Literal["write", "read", "none"]


@dataclass(frozen=True)
class Served:
    """The server's state: the app, the tokens it accepts, whether reads need none, who may
    see payloads that are encrypted at rest, and the addresses locked out for guessing
    tokens. `reads`: the client this state reads through instead of the app's, a replica's
    (durably server --read-store): the state `served` gives GET requests has it."""

    app: App
    tokens: Tokens
    sessions: Sessions
    open_reads: bool = False
    payloads_for: PayloadsFor = "write"
    lockouts: Lockouts = field(default_factory=Lockouts)
    reads: Client | None = None

    @property
    def client(self) -> Client:
        return self.app.client if self.reads is None else self.reads

    @property
    def api(self) -> Client:
        """The client as the API acts through it (so recorded in the audit trail)."""
        return self.client.through(Via.API)

    @property
    def dashboard(self) -> Client:
        """The client as the dashboard acts through it."""
        return self.client.through(Via.DASHBOARD)

    def client_for(self, who: Identity | None) -> Client:
        """The client whose reads `who` sees: the app's, which opens encrypted payloads, if
        `who` may see them; else one on the encrypted store's own rows, whose payloads the
        views show as `encrypted (key k2)`. (Anonymous readers, on open reads, are readers.)"""
        if not isinstance(self.client.store, EncryptedStore) or self._sees_payloads(who):
            return self.client
        return self._sealed_client

    def _sees_payloads(self, who: Identity | None) -> bool:
        if self.payloads_for == "none":
            return False
        return self.payloads_for == "read" or (who is not None and who.can_write)

    @functools.cached_property
    def _sealed_client(self) -> Client:
        store = self.client.store
        inner = store.inner if isinstance(store, EncryptedStore) else store
        return Client(inner, registry=self.app, clock=self.app.clock)


def served(request: Request) -> Served:
    """The server's state for this request: a GET (or HEAD) reads through the replica, when
    the server has one (`Served.reads`); every other request acts on the store itself."""
    if request.method in ("GET", "HEAD"):
        reading: Served = request.app.state.durably_reads
        return reading
    return primary(request)


def primary(request: Request) -> Served:
    """The server's state on the store itself, whatever the method: for a GET that waits on
    the store's wake-ups (LISTEN, which a standby refuses)."""
    state: Served = request.app.state.durably
    return state


def client_address(request: Request) -> str:
    """Who is on the other end: the connection's address, or the one a trusted proxy gave
    in X-Forwarded-For (uvicorn's proxy headers, trusted from --forwarded-allow-ips)."""
    return request.client.host if request.client is not None else "unknown"


def locked_out(request: Request, state: Served) -> int | None:
    """The seconds the request's address must wait before it may try a token again (None:
    it may now). Asked before any token is looked at."""
    wait = state.lockouts.locked(client_address(request), state.app.clock.now())
    return None if wait is None else max(1, math.ceil(wait.total_seconds()))


def count_failure(request: Request, state: Served) -> None:
    """A token the server does not know, counted against the request's address; the attempt
    that locks the address out is logged (once per lockout)."""
    address = client_address(request)
    if state.lockouts.failed(address, state.app.clock.now()):
        log.warning(
            "%s is locked out: %d attempts with unknown tokens within %s; its attempts are "
            "refused (429) until the oldest is that old",
            address,
            state.lockouts.failures,
            state.lockouts.window,
        )


def _bearer(request: Request, state: Served) -> Identity | None:
    """The identity of the request's bearer token (None: it sent none); 401 for a token the
    server does not know, 429 (without looking at the token) from an address locked out."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    wait = locked_out(request, state)
    if wait is not None:
        raise HTTPException(429, lockout_message(wait), headers={"Retry-After": str(wait)})
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("the Authorization header must be `Bearer TOKEN`")
    identity = state.tokens.identify(token.strip())
    if identity is None:
        count_failure(request, state)
        raise _unauthorized(_UNKNOWN)
    return identity


def lockout_message(wait: int) -> str:
    """Why an address is refused, and when it may try again."""
    return (
        f"too many attempts with unknown tokens from this address: try again in {wait} "
        "seconds, with a token the server knows"
    )


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def reader(request: Request, state: Annotated[Served, Depends(served)]) -> Identity:
    """Who reads: any known token; anybody when the server opened its reads."""
    identity = _bearer(request, state)
    if identity is not None:
        return identity
    if state.open_reads:
        return _ANONYMOUS
    raise _unauthorized(_MISSING)


def auditor(request: Request, state: Annotated[Served, Depends(served)]) -> Identity:
    """Who reads the audit trail: a known token of either role, even when the server opened
    its reads (the trail says who did what, when: not for anybody who can reach the server)."""
    identity = _bearer(request, state)
    if identity is None:
        raise _unauthorized(_MISSING)
    return identity


def writer(request: Request, state: Annotated[Served, Depends(served)]) -> Identity:
    """Who acts: a token with the write role (its name is recorded as who did it)."""
    identity = _bearer(request, state)
    if identity is None:
        raise _unauthorized(_MISSING)
    if not identity.can_write:
        raise HTTPException(
            403,
            f"the token {identity.name!r} may only read; acting needs a token with the write role",
        )
    return identity


_UNKNOWN = (
    "this token is not one the server knows: check it, or make one with `durably token new "
    "NAME` and add its line to the server's tokens"
)
_MISSING = (
    "this route needs a token: send `Authorization: Bearer TOKEN` (make one with `durably token "
    f"new NAME`; the server reads them from --tokens-file or ${ENV})"
)

Reader = Annotated[Identity, Depends(reader)]
Auditor = Annotated[Identity, Depends(auditor)]
Writer = Annotated[Identity, Depends(writer)]
