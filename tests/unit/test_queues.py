"""The pure rules of queues (durably.core.queues): which queues a worker serves, how a rate
is written, and what an app refuses to declare."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durably
from durably.core.queues import DEFAULT_QUEUE, Queue, Rate, parse_rate, served_queues
from durably.core.slots import Candidate, Counts, share
from durably.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/minute", Rate(100, timedelta(minutes=1))),
        ("10/s", Rate(10, timedelta(seconds=1))),
        ("5/30s", Rate(5, timedelta(seconds=30))),
        (" 1000 / 1h ", Rate(1000, timedelta(hours=1))),
        ("2/day", Rate(2, timedelta(days=1))),
    ],
)
def test_a_rate_reads_as_runs_per_period(text: str, rate: Rate) -> None:
    assert parse_rate(text, "rate") == rate


@pytest.mark.parametrize("text", ["100", "0/minute", "10/fortnight", "-1/s", "5/0s", 7, "a/s"])
def test_a_rate_that_does_not_read_is_refused_with_how_to_write_one(text: object) -> None:
    with pytest.raises(ConfigError, match="'100/minute'"):
        parse_rate(text, "rate")


def test_a_worker_serves_every_declared_queue_and_the_default_unless_told() -> None:
    declared = {"emails": Queue("emails", concurrency=2)}
    assert [q.name for q in served_queues(declared, None)] == [DEFAULT_QUEUE, "emails"]
    assert served_queues(declared, ["emails"]) == [declared["emails"]]
    with pytest.raises(ConfigError, match=r"no queue named 'sms'.*declared: default, emails"):
        served_queues(declared, ["sms"])
    with pytest.raises(ConfigError, match="at least one queue"):
        served_queues(declared, [])


def test_an_app_refuses_a_start_on_a_queue_it_did_not_declare(tmp_path: object) -> None:
    app = durably.App(f"sqlite:///{tmp_path}/s.db")

    @app.workflow
    def hello(name: str) -> str:
        return name

    with pytest.raises(ConfigError, match=r"no queue named 'emails'.*app\.queue"):
        app.start(hello, "x", queue="emails")
    with pytest.raises(ConfigError, match="default queue cannot be declared"):
        app.queue(DEFAULT_QUEUE, concurrency=1)
    with pytest.raises(ConfigError, match="concurrency_per_key must be a whole number"):
        app.queue("emails", concurrency_per_key=0)
    app.queue("emails", concurrency=1)
    with pytest.raises(ConfigError, match="declared twice"):
        app.queue("emails", concurrency=2)
    assert app.client.get(app.start(hello, "x", queue="emails").id).queue == "emails"


def runs(key: str, count: int, began: int = 0) -> tuple[str, list[Candidate]]:
    return key, [Candidate(f"{key}{n}", key, n < began) for n in range(count)]


def test_free_slots_go_round_robin_between_keys() -> None:
    heads = [runs("a", 5), runs("b", 2), runs("c", 1)]
    taken = share(Queue("q"), heads, Counts(), limit=6)
    assert [run.run_id for run in taken] == ["a0", "b0", "c0", "a1", "b1", "a2"]


def test_a_key_without_a_free_slot_is_passed_over() -> None:
    queue = Queue("q", concurrency_per_key=2, concurrency=4)
    counts = Counts(busy=1, busy_by_key={"a": 2})
    taken = share(queue, [runs("a", 5), runs("b", 5)], counts, limit=10)
    assert [run.run_id for run in taken] == ["b0", "b1"]  # a is full; b gets its two
    taken = share(queue, [runs("b", 5), runs("c", 5)], Counts(busy=3), limit=10)
    assert [run.run_id for run in taken] == ["b0"]  # the queue has one slot left


def test_a_spent_rate_holds_back_only_runs_that_have_not_begun() -> None:
    queue = Queue("q", rate_per_key=Rate(1, timedelta(minutes=1)))
    counts = Counts(begun_by_key={"a": 1})
    taken = share(queue, [runs("a", 3, began=1), runs("b", 3)], counts, limit=10)
    assert [run.run_id for run in taken] == ["a0", "b0"]
