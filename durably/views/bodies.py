"""What callers send the API: the bodies of its routes that start runs and act on them,
checked by pydantic before anything is done (an unknown field or a bad value is refused by
name). What it answers is in durably.views.models."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from durably.client.correlation import MAX_LENGTH
from durably.core.attributes import MAX_ATTRIBUTES, MAX_VALUE
from durably.core.names import MAX_NAME, NAME_PATTERN, RUN_ID_PATTERN
from durably.core.priority import MAX_PRIORITY

__all__ = [
    "DecideIn",
    "FailIn",
    "QueryIn",
    "ReasonIn",
    "RestartIn",
    "RetryIn",
    "SignalIn",
    "SkipIn",
    "StartIn",
    "UpdateIn",
    "UpgradeIn",
]

_STRICT = ConfigDict(extra="forbid")


def _time_text(value: object) -> object:
    """A time as a person writes it in JSON: a text, not a number (which pydantic would read
    as seconds since 1970, a time nobody meant)."""
    if isinstance(value, str):
        return value
    raise ValueError("a time is an ISO 8601 text with its zone, e.g. 2026-12-01T09:00:00+00:00")


class StartIn(BaseModel):
    model_config = _STRICT
    workflow: str = Field(min_length=1, max_length=200, description="A workflow of the app")
    input: list[Any] | dict[str, Any] = Field(
        default_factory=list,
        description="The arguments: a list (by position) or an object (by name), read "
        "through the workflow's parameter types",
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        pattern=RUN_ID_PATTERN,
        description="The run's id (default: a random one); starting an id again is "
        "idempotent. No control character, no '/'",
    )
    priority: int | None = Field(
        default=None,
        ge=0,
        le=MAX_PRIORITY,
        description="0 to 1000: a minute's head start in the claim order per level "
        "(default: the workflow's, else 0)",
    )
    correlation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LENGTH,
        description="The request this run serves: recorded with it and its children, "
        "searched by (default: the caller's trace id, if it has one)",
    )
    attributes: dict[str, str] | None = Field(
        default=None,
        max_length=MAX_ATTRIBUTES,
        description="Strings to find the run by (GET /api/runs?attr=name:value), e.g. "
        '{"customer": "42"}: stored unencrypted, so a secret-looking name (password, '
        "api_key, ...) is refused. Names without ':' or '='; values of at most "
        f"{MAX_VALUE} characters",
    )
    debounce: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        description="Debounce this start ('30s', '5m'; with debounce_key): the starts of the "
        "workflow with the key make one run, due once none came for this long, with the last "
        "one's input. A start that joins that run answers it with 200",
    )
    debounce_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        description="Which starts coalesce (a customer's id, a document's)",
    )
    max_wait: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        description="With debounce: the run is due at the latest this long after the first "
        "start of its key, however many come",
    )
    queue: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        pattern=NAME_PATTERN,
        description="The queue it goes on (default: the workflow's); one the app declares",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        pattern=NAME_PATTERN,
        description="Whose run it is (a customer, a tenant): its queue's per-key limits",
    )
    delay: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        description="Due this long from now, not at once ('24h', '30m')",
    )
    start_at: Annotated[AwareDatetime, BeforeValidator(_time_text)] | None = Field(
        default=None, description="Due at this time (ISO 8601, with its zone), not at once"
    )


class SignalIn(BaseModel):
    model_config = _STRICT
    data: Any = Field(default=None, description="The signal's payload, any JSON value")
    dedupe_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The same key twice stores the signal once",
    )


class QueryIn(BaseModel):
    model_config = _STRICT
    args: list[Any] = Field(
        default_factory=list,
        description="The handler's arguments by position, each a JSON value",
    )
    timeout: float = Field(
        default=30,
        gt=0,
        le=300,
        description="Seconds to wait for the answer; then 504, and the replay is abandoned",
    )


class UpdateIn(BaseModel):
    model_config = _STRICT
    args: list[Any] = Field(
        default_factory=list,
        description="The handler's arguments by position, each a JSON value",
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        pattern=NAME_PATTERN,
        description="The update's id: the same id is applied once and answered with the same "
        "value (send it again after a lost answer); none: a new update",
    )
    timeout: float = Field(
        default=30,
        gt=0,
        le=60,
        description="Seconds to wait for the run to apply it; then 504 (the update stays "
        "sent: ask again with its id)",
    )


class DecideIn(BaseModel):
    model_config = _STRICT
    comment: str | None = Field(default=None, max_length=2000)


class ReasonIn(BaseModel):
    model_config = _STRICT
    reason: str | None = Field(default=None, max_length=2000)


class FailIn(BaseModel):
    model_config = _STRICT
    reason: str = Field(min_length=1, max_length=2000)


class RetryIn(BaseModel):
    model_config = _STRICT
    from_step: int | None = Field(
        default=None, ge=0, description="Run every step from this position again"
    )


class SkipIn(BaseModel):
    model_config = _STRICT
    result: Any = Field(default=None, description="The failed step's result, any JSON value")


class RestartIn(BaseModel):
    model_config = _STRICT
    from_step: int | str | None = Field(
        default=None,
        description="A step's position, or its name (default: the first step that failed, "
        "was cancelled or undone)",
    )
    id: str | None = Field(default=None, min_length=1, max_length=MAX_NAME, pattern=RUN_ID_PATTERN)


class UpgradeIn(BaseModel):
    model_config = _STRICT
    workflow: str | None = Field(default=None, description="Only this workflow's runs")
    dry_run: bool = Field(default=False, description="Say what would move; move nothing")
