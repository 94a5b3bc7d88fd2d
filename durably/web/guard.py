"""What every response of the server carries, and what every request may bring: security
headers (a content security policy with no inline script, no framing, no MIME sniffing, no
referrer), and a bound on a request's body, enforced before the body is read: a declared
length over it is refused at once with 413, and a body sent without one is read only up to
the bound.

An ASGI middleware of its own (not Starlette's BaseHTTPMiddleware, which reads and wraps
every response): it looks at the request's headers and the response's start, nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["DEFAULT_MAX_BODY", "Guard"]

DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: a run's input or a signal's payload may take as much

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The dashboard's pages load their one script and their stylesheet from /static; the bars of
# a run's timeline are placed by style attributes. The API's docs page (/api/docs) is Swagger
# UI's, served from /static too, started by a script file of its own: the same policy holds.
_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class Guard:
    def __init__(self, app: ASGIApp, *, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_body:
            await _too_large(send, f"{declared} bytes", self.max_body)
            return
        if declared is None and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            body = await _read_up_to(receive, self.max_body)
            if body is None:
                await _too_large(send, "more bytes than that", self.max_body)
                return
            receive = _replay(body)
        await self.app(scope, receive, send)


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            headers += _HEADERS
            headers.append((b"content-security-policy", _POLICY.encode()))
            message["headers"] = headers
        await send(message)

    return sending


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _read_up_to(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it is longer than `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _too_large(send: Send, size: str, limit: int) -> None:
    said = {
        "error": "too_large",
        "message": f"the request's body has {size}; the server takes at most {limit} "
        "(durably server --max-body): send less, or raise the limit",
    }
    body = json.dumps(said).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
