"""The pure part of webhooks (durably.core.webhooks): kinds and statuses, the checks of a
subscription, the body a delivery sends, and its signature and verification."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import pytest

from durably.core.status import FINAL, PARKED, RunStatus
from durably.core.webhooks import (
    KIND_OF_STATUS,
    DeliveryState,
    WebhookDelivery,
    WebhookKind,
    body,
    check_kinds,
    check_url,
    headers,
    signature,
    verify,
)
from durably.errors import ConfigError

AT = datetime(2026, 1, 1, tzinfo=UTC)
DELIVERY = WebhookDelivery(
    id=7,
    webhook="wh_a",
    kind=WebhookKind.RUN_FAILED,
    run_id="order-1",
    workflow="checkout",
    status="timed_out",
    at=AT,
    state=DeliveryState.DUE,
    attempts=0,
    due_at=AT,
    last_error=None,
    delivered_at=None,
)


def test_every_end_and_parking_and_pause_is_some_kind_and_nothing_else_is() -> None:
    assert set(KIND_OF_STATUS) == FINAL | PARKED | {RunStatus.PAUSED}
    assert set(KIND_OF_STATUS.values()) == set(WebhookKind)


def test_kinds_are_checked_by_name_and_kept_in_one_order() -> None:
    assert check_kinds(["run_paused", " run_completed", "run_paused"]) == (
        WebhookKind.RUN_COMPLETED,
        WebhookKind.RUN_PAUSED,
    )
    with pytest.raises(ConfigError, match=r"'run_done'.*the kinds are run_completed, run_failed"):
        check_kinds(["run_done"])
    with pytest.raises(ConfigError, match="at least one event kind"):
        check_kinds(["", "  "])


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://h.example.com/", "scheme 'ftp'"),
        ("h.example.com/hook", "scheme 'none'"),
        ("https:///hook", "names no host"),
        ("https://h.example.com:70000/", "malformed"),
        ("https://h.example.com/a b", "spaces or control characters"),
        ("", "1 to 2000 characters"),
    ],
)
def test_a_url_durably_cannot_post_to_is_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        check_url(url)


def test_http_and_https_urls_with_a_host_are_taken() -> None:
    for url in ("http://127.0.0.1:8080/hooks?x=1", "https://user:pw@h.example.com/"):
        assert check_url(url) == url


def test_the_body_names_the_run_and_never_its_payloads() -> None:
    sent = json.loads(body(DELIVERY))
    assert sent == {
        "id": 7,
        "kind": "run_failed",
        "run": {
            "id": "order-1",
            "workflow": "checkout",
            "status": "timed_out",
            "queue": None,
            "key": None,
            "correlation_id": None,
        },
        "at": "2026-01-01T00:00:00Z",
    }


def test_the_signature_is_an_hmac_of_the_time_and_the_body() -> None:
    payload = body(DELIVERY)
    header = signature("s3cret", payload, at=AT)
    stamp = int(AT.timestamp())
    mac = hmac.new(b"s3cret", f"{stamp}.".encode() + payload, hashlib.sha256).hexdigest()
    assert header == f"t={stamp},v1={mac}"
    assert headers(DELIVERY, payload, "s3cret", at=AT)["Durably-Signature"] == header
    assert "Durably-Signature" not in headers(DELIVERY, payload, None, at=AT)


def test_verify_takes_only_a_fresh_signature_of_this_body_with_this_secret() -> None:
    payload = body(DELIVERY)
    header = signature("s3cret", payload, at=AT)
    assert verify("s3cret", payload, header, now=AT + timedelta(minutes=4))
    assert verify("s3cret", payload, f"{header},v1=00ff", now=AT)  # another key's too
    assert not verify("s3cret", payload, header, now=AT + timedelta(minutes=6))
    assert not verify("s3cret", payload, header, now=AT - timedelta(minutes=6))
    assert not verify("other", payload, header, now=AT)
    assert not verify("s3cret", payload + b"\n", header, now=AT)
    assert not verify("s3cret", payload, header.split(",")[1], now=AT)  # no time
    assert not verify("s3cret", payload, "t=abc,v1=00", now=AT)
    assert not verify("s3cret", payload, "", now=AT)
