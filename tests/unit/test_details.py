"""Every event kind is said in words in a timeline's DETAIL: no kind shows its stored JSON
object as it is; only a value your code gave or got (an input, a result, a signal's data, a
heartbeat's details) stays as its JSON, after what it is."""

from __future__ import annotations

import pytest

from durably.core.history import EventKind
from durably.views.details import detail

from .test_payloads import WRITTEN, event


@pytest.mark.parametrize(("kind", "data"), [(kind, data) for kind, data, _ in WRITTEN])
def test_each_kind_is_said_in_words(kind: EventKind, data: str) -> None:
    said = detail(event(kind, data))

    assert said
    assert not said.startswith(("{", "[", '"')), said  # not the stored JSON as it is


def test_a_step_call_reads_as_the_call_it_was() -> None:
    started = event(
        EventKind.STEP_STARTED,
        '{"key": "o-1:0:charge", "input": {"args": ["o-1", 12], "kwargs": {"retry": true}}}',
    )
    assert detail(started).endswith('("o-1", 12, retry=true), key o-1:0:charge')


def test_a_value_is_named_before_its_json() -> None:
    assert detail(event(EventKind.STEP_COMPLETED, '{"id":"ch_1"}')) == 'returned {"id":"ch_1"}'
    assert detail(event(EventKind.VALUE_RECORDED, "0.25")) == "recorded 0.25"
