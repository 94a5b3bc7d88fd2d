"""The HTTP API's outbound webhooks (durably.client.webhooks), under /api/webhooks: subscribe,
list and remove webhooks, read their deliveries and the dead ones, send a dead one again.
Every route needs a token with the write role, reads too: a webhook's URL may carry a
credential of its receiver."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response

from durably.core.names import MAX_NAME, NAME_PATTERN
from durably.views.webhooks import DeliveryOut, RetriedOut, WebhookIn, WebhookOut
from durably.web.access import Served, Writer, served
from durably.web.errors import ERROR_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES, tags=["webhooks"])
State = Annotated[Served, Depends(served)]
WebhookId = Annotated[
    str,
    Path(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN, description="The webhook's id"),
]
DeliveryId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The delivery's id")]


@router.get("/webhooks")
def list_webhooks(state: State, who: Writer) -> list[WebhookOut]:
    """Every webhook: whether a secret signs it, never the secret."""
    return [WebhookOut.of(hook) for hook in state.api.webhooks.list()]


@router.post("/webhooks", status_code=201)
def add_webhook(body: WebhookIn, state: State, who: Writer) -> WebhookOut:
    """Subscribe a URL to kinds of run state change; an unknown kind or a URL that is not
    http(s) is refused (422) by name."""
    made = state.api.webhooks.add(
        body.url,
        body.events,
        secret=body.secret,
        workflow=body.workflow,
        attempts=body.attempts,
        by=who.name,
    )
    return WebhookOut.of(made)


@router.get("/webhooks/deliveries")
def deliveries(
    state: State,
    who: Writer,
    webhook: Annotated[str | None, Query(max_length=MAX_NAME, pattern=NAME_PATTERN)] = None,
    failed: Annotated[bool, Query(description="Only the dead: every attempt failed")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[DeliveryOut]:
    """The newest deliveries (of one webhook); `failed`: the dead-letter list."""
    found = state.api.webhooks.deliveries(webhook, failed=failed, limit=limit)
    return [DeliveryOut.of(item) for item in found]


@router.post("/webhooks/deliveries/{delivery_id}/retry", status_code=202)
def retry_delivery(delivery_id: DeliveryId, state: State, who: Writer) -> RetriedOut:
    """Send a dead delivery again (a worker does, at once); 409 if it is not dead."""
    state.api.webhooks.retry(delivery_id, by=who.name)
    return RetriedOut(delivery=delivery_id)


@router.delete("/webhooks/{webhook_id}", status_code=204)
def remove_webhook(webhook_id: WebhookId, state: State, who: Writer) -> Response:
    """Unsubscribe the webhook; its deliveries go with it."""
    state.api.webhooks.remove(webhook_id, by=who.name)
    return Response(status_code=204)
