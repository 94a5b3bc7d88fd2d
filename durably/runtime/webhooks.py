"""Sending webhook deliveries (durably.core.webhooks): a background task of every worker, and
one pass of it for `durably webhooks deliver` and tests.

A pass leases the deliveries due (so that two workers never send the same one at once), POSTs
each with a timeout, and settles it: delivered on a 2xx answer; else the attempt's error is
recorded and it is tried again after a backoff with full jitter (the engine's own retry
decision, durably.core.retry), until its webhook's attempts are spent: then it is dead, in
the dead-letter list, until a person retries it. A worker that dies while sending leaves the
delivery leased; the next pass after the lease sends it. Delivery is at least once: a
receiver dedupes on the Durably-Delivery header.

Sends run in threads of their own, never on the worker's event loop or its committer's thread,
so that a slow or dead receiver does not slow a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import random
import urllib.error
import urllib.request
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durably.clock import Clock
from durably.core.retry import Classification, Retry, RetryAt, decide
from durably.core.webhooks import MAX_ERROR, Outgoing, Settlement, body, headers
from durably.errors import StoreUnavailable
from durably.runtime.hooks import Hooks
from durably.stores.protocol import Store

__all__ = ["BACKOFF", "Courier", "Passed", "post"]

log = logging.getLogger("durably.webhooks")

# Between attempts: 30s, 1m, 2m, 4m ... capped at an hour, each a random part of it (full
# jitter); the 8 attempts of a webhook's default span about an hour of a receiver's outage.
BACKOFF = Retry(attempts=1, initial="30s", backoff=2.0, max_delay="1h")
_TIMEOUT = timedelta(seconds=10)
# A delivery's lease, in sends' timeouts: urllib's timeout bounds each wait of a send (the
# connection, the answer), so a pass settles well within it.
_LEASE_TIMEOUTS = 6
_BATCH = 16
_EVERY = timedelta(seconds=1)  # how often an idle worker looks for due deliveries


@dataclass(frozen=True, slots=True)
class Passed:
    """What one pass did: deliveries delivered, failed (to be tried again), and dead."""

    delivered: int = 0
    failed: int = 0
    dead: int = 0

    @property
    def sent(self) -> int:
        return self.delivered + self.failed + self.dead


class Courier:
    """Sends the deliveries due in `store`, `batch` at a time, each with `timeout`, each
    leased for `lease` (default: six timeouts) while it is sent."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        hooks: Hooks | None = None,
        timeout: timedelta = _TIMEOUT,
        lease: timedelta | None = None,
        batch: int = _BATCH,
        backoff: Retry = BACKOFF,
        rng: random.Random | None = None,
    ) -> None:
        lease = timeout * _LEASE_TIMEOUTS if lease is None else lease
        if lease <= timeout:
            raise ValueError("a delivery's lease must be longer than a send's timeout")
        self.store, self.clock, self.hooks = store, clock, hooks
        self.timeout, self.lease, self.batch, self.backoff = timeout, lease, batch, backoff
        self._rng = rng or random.Random()

    def deliver_due(self) -> Passed:
        """One pass: lease what is due now, send it all at once, settle each; what it did."""
        taken = self.store.take_deliveries(now=self.clock.now(), lease=self.lease, limit=self.batch)
        if not taken:
            return Passed()
        with ThreadPoolExecutor(len(taken), thread_name_prefix="durably-webhook") as pool:
            errors = list(pool.map(self._send, taken))
        # One transaction for the pass's settlements: a pass costs the store two writes
        decided = [self._decide(item, error) for item, error in zip(taken, errors, strict=True)]
        self.store.settle_deliveries([settled for settled, _ in decided], now=self.clock.now())
        outcomes = [outcome for _, outcome in decided]
        if self.hooks is not None:
            for item, outcome in zip(taken, outcomes, strict=True):
                self.hooks.webhook_attempted(item.delivery.webhook, outcome)
        return Passed(*(outcomes.count(kind) for kind in ("delivered", "failed", "dead")))

    async def run(self, every: timedelta = _EVERY) -> None:
        """Pass after pass until cancelled: at once again after a full batch, else after
        `every`. A store that cannot be reached is tried again at the next pass."""
        while True:
            try:
                passed = await _to_the_end(asyncio.to_thread(self.deliver_due))
            except StoreUnavailable as exc:
                log.warning("webhook deliveries wait for the store: %s", exc)
                passed = Passed()
            if passed.sent < self.batch:
                await asyncio.sleep(every.total_seconds())

    def _send(self, item: Outgoing) -> str | None:
        payload = body(item.delivery)
        sent = headers(item.delivery, payload, item.secret, at=self.clock.now())
        return post(item.url, payload, sent, timeout=self.timeout)

    def _decide(self, item: Outgoing, error: str | None) -> tuple[Settlement, str]:
        """How the attempt ended: delivered, to try again after the backoff, or dead."""
        delivery, attempt = item.delivery, item.delivery.attempts + 1
        if error is None:
            return Settlement(delivery.id, attempt), "delivered"
        decided = decide(
            _with_attempts(self.backoff, item.max_attempts),
            Classification(True),
            attempt=attempt,
            first_attempt_at=delivery.at,
            now=self.clock.now(),
            rng=self._rng,
        )
        retry_at = decided.due if isinstance(decided, RetryAt) else None
        log.log(
            logging.WARNING if retry_at is None else logging.INFO,
            "webhook %s: delivery %s (%s of run %s), attempt %d of %d: %s%s",
            *(delivery.webhook, delivery.id, delivery.kind, delivery.run_id, attempt),
            *(item.max_attempts, error, "" if retry_at else "; it is dead"),
        )
        outcome = "failed" if retry_at is not None else "dead"
        return Settlement(delivery.id, attempt, error, retry_at), outcome


def post(
    url: str, payload: bytes, sent: dict[str, str], *, timeout: timedelta = _TIMEOUT
) -> str | None:
    """POST `payload` to `url`; None on a 2xx answer, else why not (the status code, or the
    exception's text), cut to MAX_ERROR characters. Redirects are not followed: a delivery
    goes to the URL subscribed.

    The standard library's urllib, in the caller's thread: the base install stays without an
    HTTP client (httpx, requests), and one POST with a timeout is all a delivery needs."""
    request = urllib.request.Request(url, data=payload, headers=sent, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout.total_seconds()) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"{type(exc).__name__}: {reason}"[:MAX_ERROR]
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return f"HTTP {status} (redirects are not followed: subscribe the URL it names)"
    return f"HTTP {status}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # the 3xx answer is the attempt's error


_OPENER = urllib.request.build_opener(_NoRedirects)


def _with_attempts(policy: Retry, attempts: int) -> Retry:
    """The backoff `policy`, up to a webhook's own number of attempts."""
    return Retry(
        attempts=attempts,
        initial=policy.initial,
        backoff=policy.backoff,
        max_delay=policy.max_delay,
        jitter=policy.jitter,
    )


async def _to_the_end(call: Coroutine[Any, Any, Passed]) -> Passed:
    """`call` (a pass in its thread); cancelled, it still waits for the pass to end (at most
    its sends' timeout), then raises: a worker that stops must not return, and let its app
    close the store, while a pass in a thread still writes to it (closing a SQLite
    connection in use crashes the process)."""
    running = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await running
        raise
