"""Starting many runs at once: `start_many` (one transaction for a batch), the async
flavours, and `start` from many threads (their starts share commits)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import durably
from durably import Start


def register(app: durably.App) -> durably.Workflow:
    @app.step
    async def twice(x: int) -> int:
        return 2 * x

    @app.workflow
    async def double(x: int) -> int:
        return await twice(x)

    return double


def test_start_many_starts_a_batch_and_returns_the_handles_in_order(app: durably.App) -> None:
    double = register(app)
    woken: list[int] = []
    app.subscribe(lambda: woken.append(1))

    handles = app.start_many(
        [Start(double, (n,)) for n in range(3)] + [Start("double", kwargs={"x": 9}, id="nine")]
    )

    assert handles[3].id == "nine"
    assert len({handle.id for handle in handles}) == 4
    assert woken == [1]  # one batch, one wake-up of local workers
    assert app.run_until_idle() == 4
    assert [handle.result(timeout=0) for handle in handles] == [0, 2, 4, 18]


def test_start_many_is_idempotent_per_id_and_refuses_another_input(app: durably.App) -> None:
    double = register(app)
    first = app.start(double, 1, id="a")

    again = app.start_many([Start(double, (1,), id="a"), Start(double, (2,), id="b")])
    assert [handle.id for handle in again] == ["a", "b"]
    assert app.client.start_many([Start(double, (2,), id="b")])[0].created is False

    with pytest.raises(durably.RunConflict, match=r"'a' already exists with a different input"):
        app.start_many([Start(double, (5,), id="a"), Start(double, (3,), id="c")])
    assert app.client.get("c").status is durably.RunStatus.PENDING  # the rest of it started
    assert app.run_until_idle() == 3
    assert first.result(timeout=0) == 2


def test_start_many_checks_every_input_before_writing_anything(app: durably.App) -> None:
    double = register(app)

    with pytest.raises(durably.PayloadError):
        app.start_many([Start(double, (1,), id="ok"), Start(double, ("not a number",))])

    assert app.client.runs().runs == []
    assert app.start_many([]) == []


def test_the_async_flavours_start_runs_from_an_event_loop(app: durably.App) -> None:
    double = register(app)

    async def main() -> list[durably.RunHandle]:
        one = await app.start_async(double, 4, id="four")
        many = await app.start_many_async([Start(double, (5,)), Start(double, (6,))])
        return [one, *many]

    handles = asyncio.run(main())

    assert handles[0].id == "four"
    assert app.run_until_idle() == 3
    assert [handle.result(timeout=0) for handle in handles] == [8, 10, 12]


def test_starts_from_many_threads_each_make_their_run_once(app: durably.App) -> None:
    double = register(app)
    barrier = threading.Barrier(8)
    started: dict[int, str] = {}
    errors: list[BaseException] = []

    def starter(index: int) -> None:
        try:
            barrier.wait(timeout=20)
            for n in range(index * 25, index * 25 + 25):
                same = n % 190  # r0..r9 are started twice, from different threads
                started[n] = app.start(double, same, id=f"r{same}").id
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=starter, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert started == {n: f"r{n % 190}" for n in range(200)}
    runs = app.client.runs(limit=500).runs
    assert sorted(run.id for run in runs) == sorted(f"r{n}" for n in range(190))
    assert all(len(app.client.history(run.id)) == 1 for run in runs)
    assert app.run_until_idle() == 190
    assert app.handle("r7").result(timeout=0) == 14
