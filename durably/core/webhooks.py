"""Outbound webhooks: what a subscriber may hear of, what a delivery says, and how it is signed.

A webhook subscribes a URL to kinds of run state change (a run completed, failed, was
cancelled, parked for a person, paused). The store makes one delivery per subscribed change
in the transaction of the change itself (a trigger on the runs table), so none is lost to a
crash and none is made for a change that rolled back; workers send them at least once, with
backoff (durably.runtime.webhooks). What is pure here: the kinds and the statuses each stands
for, the checks of a subscription, the body and the headers of a delivery, its signature
(the Stripe style: HMAC-SHA256 of "<unix time>.<body>"), and its verification, which a
receiver written in Python can call.

A delivery carries the run's id, workflow, status, queue, key and correlation id, never its
input or result: those can hold secrets, and a receiver that needs them reads the run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from durably.core.names import check_name
from durably.core.status import RunStatus
from durably.errors import ConfigError, DurablyError

__all__ = [
    "DEFAULT_ATTEMPTS",
    "KIND_OF_STATUS",
    "MAX_ATTEMPTS",
    "MAX_ERROR",
    "DeliveryNotDead",
    "DeliveryState",
    "NewWebhook",
    "Outgoing",
    "Settlement",
    "StatusChange",
    "UnknownDelivery",
    "UnknownWebhook",
    "Webhook",
    "WebhookDelivery",
    "WebhookKind",
    "body",
    "check_kinds",
    "check_url",
    "check_webhook",
    "headers",
    "signature",
    "verify",
]

DEFAULT_ATTEMPTS = 8
MAX_ATTEMPTS = 50
MAX_ERROR = 500  # characters of an attempt's error kept (a status code, an exception's text)
_MAX_URL = 2000
_TOLERANCE = timedelta(minutes=5)  # how old a signature `verify` accepts by default


class WebhookKind(StrEnum):
    """What a subscriber may hear of."""

    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"  # failed, or timed out
    RUN_CANCELLED = "run_cancelled"
    NEEDS_ATTENTION = "needs_attention"  # parked for a person: needs_attention, compensation_failed
    RUN_PAUSED = "run_paused"


# The one table the store's trigger is written from: a run's new status -> the kind it is.
KIND_OF_STATUS: Mapping[RunStatus, WebhookKind] = {
    RunStatus.COMPLETED: WebhookKind.RUN_COMPLETED,
    RunStatus.FAILED: WebhookKind.RUN_FAILED,
    RunStatus.TIMED_OUT: WebhookKind.RUN_FAILED,
    RunStatus.CANCELLED: WebhookKind.RUN_CANCELLED,
    RunStatus.NEEDS_ATTENTION: WebhookKind.NEEDS_ATTENTION,
    RunStatus.COMPENSATION_FAILED: WebhookKind.NEEDS_ATTENTION,
    RunStatus.PAUSED: WebhookKind.RUN_PAUSED,
}


class DeliveryState(StrEnum):
    DUE = "due"  # to be sent (again), at its due time; or leased by a worker sending it
    DELIVERED = "delivered"  # the receiver answered 2xx
    DEAD = "dead"  # every attempt failed: the dead-letter list, until a person retries it


class UnknownWebhook(DurablyError):
    """No webhook has the given id."""


class UnknownDelivery(DurablyError):
    """No webhook delivery has the given id."""


class DeliveryNotDead(DurablyError):
    """A retry of a webhook delivery that is not dead (due, being sent, or delivered)."""


@dataclass(frozen=True, slots=True)
class NewWebhook:
    """A subscription to make: `kinds` of change of the runs of `workflow` (None: every
    workflow), sent to `url`, signed with `secret` if one is given, tried up to `attempts`."""

    id: str
    url: str
    kinds: tuple[WebhookKind, ...]
    secret: str | None = None
    workflow: str | None = None
    attempts: int = DEFAULT_ATTEMPTS


@dataclass(frozen=True, slots=True)
class Webhook:
    """A subscription as listed: whether it has a secret, never the secret."""

    id: str
    url: str
    kinds: tuple[WebhookKind, ...]
    signed: bool
    workflow: str | None
    attempts: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One notice of one change to one webhook, as the deliveries list shows it."""

    id: int
    webhook: str
    kind: WebhookKind
    run_id: str
    workflow: str
    status: str
    at: datetime  # when the run changed
    state: DeliveryState
    attempts: int  # made so far
    due_at: datetime | None  # the next try (or the end of a worker's lease); None once settled
    last_error: str | None
    delivered_at: datetime | None
    queue: str | None = None
    key: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A delivery a worker leased to send: where, signed with what, and what it says."""

    delivery: WebhookDelivery
    url: str
    secret: str | None
    max_attempts: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """How attempt number `attempts` of a leased delivery ended: delivered (no `error`), to
    be tried again at `retry_at`, or dead (an error and no retry)."""

    delivery_id: int
    attempts: int
    error: str | None = None
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A run's status changed (the change stream: durably listen)."""

    run: str
    workflow: str
    status: str
    at: datetime

    def to_json(self) -> str:
        return json.dumps(
            {"run": self.run, "workflow": self.workflow, "status": self.status, "at": _iso(self.at)}
        )

    @classmethod
    def from_json(cls, text: str) -> StatusChange:
        fields = json.loads(text)
        at = fields["at"]
        when = (
            datetime.fromtimestamp(at, UTC)
            if isinstance(at, int | float)
            else datetime.fromisoformat(at)
        )
        return cls(fields["run"], fields["workflow"], fields["status"], when)


def check_kinds(kinds: Collection[str]) -> tuple[WebhookKind, ...]:
    """The kinds named, in the order of WebhookKind; an unknown one is refused by name."""
    known = {str(kind) for kind in WebhookKind}
    wanted = {kind.strip() for kind in kinds if kind.strip()}
    unknown = sorted(wanted - known)
    if unknown:
        raise ConfigError(
            f"unknown webhook event kind(s) {', '.join(map(repr, unknown))}: the kinds are "
            f"{', '.join(known_kind.value for known_kind in WebhookKind)}"
        )
    if not wanted:
        raise ConfigError(
            "a webhook needs at least one event kind: choose among "
            f"{', '.join(kind.value for kind in WebhookKind)}"
        )
    return tuple(kind for kind in WebhookKind if kind.value in wanted)


def check_url(url: str) -> str:
    """`url`, if it is an absolute http or https URL with a host; refused, saying why."""
    if not isinstance(url, str) or not url or len(url) > _MAX_URL:
        raise ConfigError(f"a webhook's URL is a text of 1 to {_MAX_URL} characters")
    if any(ord(char) < 33 or ord(char) == 127 for char in url):
        raise ConfigError(f"the webhook URL {url!r} has spaces or control characters: encode them")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks the port is a number in range
    except ValueError as exc:
        raise ConfigError(f"the webhook URL {url!r} is malformed: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(
            f"the webhook URL {url!r} has scheme {parts.scheme or 'none'!r}: durably sends "
            "webhooks over http:// or https:// only (https:// for anything past this machine)"
        )
    if not parts.hostname:
        raise ConfigError(f"the webhook URL {url!r} names no host: write it as https://host/path")
    return url


def check_webhook(webhook: NewWebhook) -> NewWebhook:
    """`webhook`, if every part of it is one durably can use."""
    check_url(webhook.url)
    check_kinds(webhook.kinds)
    if webhook.workflow is not None:
        check_name(webhook.workflow, what="the webhook's workflow")
    if not 1 <= webhook.attempts <= MAX_ATTEMPTS:
        raise ConfigError(
            f"a webhook's attempts are between 1 and {MAX_ATTEMPTS}; {webhook.attempts} is not"
        )
    if webhook.secret is not None and not webhook.secret:
        raise ConfigError("a webhook's secret may not be empty: give one, or none")
    if webhook.secret is not None and any(ord(c) < 32 or ord(c) == 127 for c in webhook.secret):
        raise ConfigError("a webhook's secret may not hold control characters")
    return webhook


def body(delivery: WebhookDelivery) -> bytes:
    """The JSON a delivery POSTs: the same bytes on every attempt (the signature covers them)."""
    run = {
        "id": delivery.run_id,
        "workflow": delivery.workflow,
        "status": delivery.status,
        "queue": delivery.queue,
        "key": delivery.key,
        "correlation_id": delivery.correlation_id,
    }
    document = {"id": delivery.id, "kind": str(delivery.kind), "run": run, "at": _iso(delivery.at)}
    return json.dumps(document, separators=(",", ":")).encode()


def signature(secret: str, payload: bytes, *, at: datetime) -> str:
    """The Durably-Signature header of `payload` sent at `at`: t=<unix>,v1=<hex HMAC-SHA256
    of "<unix>.<payload>">. The time is signed too, so that a captured delivery cannot be
    replayed later than the receiver's tolerance."""
    stamp = int(at.timestamp())
    return f"t={stamp},v1={_mac(secret, stamp, payload)}"


def headers(
    delivery: WebhookDelivery, payload: bytes, secret: str | None, *, at: datetime
) -> dict[str, str]:
    """The headers of a delivery's POST (a signature when the webhook has a secret)."""
    sent = {
        "Content-Type": "application/json",
        "Durably-Delivery": str(delivery.id),
        "Durably-Event": str(delivery.kind),
        "User-Agent": "durably-webhooks",
    }
    if secret is not None:
        sent["Durably-Signature"] = signature(secret, payload, at=at)
    return sent


def verify(
    secret: str,
    payload: bytes,
    header: str,
    *,
    now: datetime,
    tolerance: timedelta = _TOLERANCE,
) -> bool:
    """Whether `header` (a Durably-Signature) signs `payload` (the raw body, as received)
    with `secret`, at a time no further than `tolerance` from `now`: what a receiver checks
    before trusting a delivery. Compares in constant time."""
    pairs = [part.strip().partition("=") for part in header.split(",")]
    stamps = [value for key, _, value in pairs if key == "t"]
    signed = [value for key, _, value in pairs if key == "v1"]
    if len(stamps) != 1 or not stamps[0].isdigit() or not signed:
        return False
    stamp = int(stamps[0])
    if abs(now.timestamp() - stamp) > tolerance.total_seconds():
        return False
    expected = _mac(secret, stamp, payload)
    return any(hmac.compare_digest(value, expected) for value in signed)


def _mac(secret: str, stamp: int, payload: bytes) -> str:
    return hmac.new(secret.encode(), f"{stamp}.".encode() + payload, hashlib.sha256).hexdigest()


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
