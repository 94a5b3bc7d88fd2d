"""Values are never silently changed on their way into the store: through the type hints
they come back equal and of the same type, and anything else is refused, on both stores."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import durably
from durably.core.history import EventKind
from durably.errors import PayloadError
from tests.payloads import NON_JSON, RECORDS, Record, json_native, same

from .conftest import kinds, step_events

# One App per test (a function-scoped fixture), fresh run ids per example.
STORE_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def test_raw_bytes_without_a_hint_are_refused_and_nothing_is_stored(app: durably.App) -> None:
    @app.workflow
    def echo(data):  # type: ignore[no-untyped-def]
        return data

    with pytest.raises(PayloadError) as refused:
        app.start(echo, {"payload": b"raw-bytes"})
    message = str(refused.value)
    assert message.startswith(
        "the input of workflow 'echo' cannot be stored as it is: input.data[\"payload\"] is "
        "bytes (b'raw-bytes'), which would come back as str ('raw-bytes') without a type hint"
    )
    assert "`data: dict[str, bytes]`" in message
    assert app.client.runs().runs == []


def test_arguments_that_do_not_fit_are_refused_at_start(app: durably.App) -> None:
    @app.workflow
    def pair(left: int, right: int) -> int:
        return left + right

    with pytest.raises(PayloadError, match=r"missing a required argument: 'right'"):
        app.start(pair, 1)
    with pytest.raises(PayloadError, match=r"it takes pair\(left: int, right: int\)$"):
        app.start(pair, 1, 2, 3)
    assert app.client.runs().runs == []


def test_annotated_values_come_back_equal_and_of_the_same_type(app: durably.App) -> None:
    seen: list[object] = []

    @app.step
    def spread(ids: set[int], blob: bytes) -> tuple[frozenset[int], bytes]:
        seen.append((ids, blob))
        return frozenset(ids), blob + b"!"

    @app.workflow
    def keep(
        ids: set[int], blob: bytes, *, names: dict[int, str]
    ) -> dict[str, tuple[frozenset[int], bytes] | dict[int, str]]:
        return {"spread": spread(ids, blob), "names": names}

    handle = app.start(keep, {1, 2}, b"raw-bytes", names={7: "seven"})
    assert app.run_until_idle() == 1
    result = handle.result(timeout=0)
    assert same(seen, [({1, 2}, b"raw-bytes")])
    assert same(result, {"spread": (frozenset({1, 2}), b"raw-bytes!"), "names": {7: "seven"}})


def test_a_result_that_would_change_fails_the_run(app: durably.App) -> None:
    @app.workflow
    def numbers():  # type: ignore[no-untyped-def]
        return {1, 2, 3}

    handle = app.start(numbers)
    app.run_until_idle()
    assert handle.status() is durably.RunStatus.FAILED
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "durably.errors.PayloadError"
    assert failed.value.message.startswith(
        "the result of workflow 'numbers' cannot be stored as it is: result is set ({1, 2, 3}), "
        "which would come back as list ([1, 2, 3]) without a type hint. Annotate the return "
        "type (e.g. `-> set[int]`)"
    )
    assert kinds(app.client.history(handle.id))[-1] == "run_failed"


def test_a_step_result_that_would_change_fails_the_step_for_good(app: durably.App) -> None:
    calls: list[str] = []

    @app.step
    def collect():  # type: ignore[no-untyped-def]
        calls.append("collect")
        return {"a", "b"}

    @app.workflow
    def gather() -> list[str]:
        return sorted(collect())

    handle = app.start(gather)
    assert app.run_until_idle() == 1
    assert app.run_until_idle() == 0  # not retried
    assert calls == ["collect"]
    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.FAILED
    assert run.result is None
    history = app.client.history(handle.id)
    assert step_events(history) == [
        ("step_started", 0, "collect", 1),
        ("step_failed", 0, "collect", 1),
    ]
    [failed] = [event for event in history if event.kind is EventKind.STEP_FAILED]
    data = json.loads(failed.data or "{}")
    assert data["reason"] == "terminal"
    assert data["error_class"] == "durably.errors.PayloadError"
    assert "result is set" in data["message"]
    assert "`-> set[str]`" in data["message"]


def test_a_skipped_step_result_is_checked_against_the_step_hint(app: durably.App) -> None:
    @app.step(retry=durably.Retry(attempts=1))
    def lookup() -> set[int]:
        raise ConnectionError("the service is down")

    @app.workflow
    def count() -> int:
        found = lookup()
        assert isinstance(found, set)
        return len(found)

    handle = app.start(count)
    app.run_until_idle()
    assert handle.status() is durably.RunStatus.NEEDS_ATTENTION
    with pytest.raises(PayloadError, match=r"result is list \(\[1, 2\]\), which its type hint"):
        app.client.skip_step(handle.id, result=[1, 2])
    app.client.skip_step(handle.id, result={1, 2})
    app.run_until_idle()
    assert handle.result(timeout=0) == 2


@STORE_SETTINGS
@given(record=RECORDS)
def test_a_composite_record_comes_back_equal_through_the_store(
    app: durably.App, record: Record
) -> None:
    if "copy" not in app.workflow_names():

        @app.step
        def stamp(record: Record) -> Record:
            return record

        @app.workflow
        def copy(record: Record) -> Record:
            return stamp(record)

    handle = app.start("copy", record, id=uuid.uuid4().hex)
    app.run_until_idle()
    back = handle.result(timeout=0)
    assert same(record, back)  # NaN among the readings stays NaN, infinities stay infinite


@STORE_SETTINGS
@given(value=NON_JSON)
def test_a_value_of_a_non_json_type_is_refused_at_start(app: durably.App, value: Any) -> None:
    assert not json_native(value)
    if "loose" not in app.workflow_names():

        @app.workflow
        def loose(data):  # type: ignore[no-untyped-def]
            return data

    with pytest.raises(PayloadError, match=r"^the input of workflow 'loose' cannot be stored"):
        app.start("loose", value, id=uuid.uuid4().hex)
    assert app.client.runs().runs == []
