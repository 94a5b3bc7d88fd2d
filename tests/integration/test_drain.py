"""run_until_idle with the system clock: a drain goes on while the checkpoints it commits make
other runs due (the children a run starts, the parent a child's end wakes), on both stores.
It used to read the time before those commits and stop short of them."""

from __future__ import annotations

import durably
from durably import RunStatus


def test_a_drain_runs_a_family_to_its_end(store_url: str) -> None:
    app = durably.App(store_url)  # the system clock: commits and claims read real time
    try:

        @app.workflow
        async def child(n: int) -> int:
            return n * 2

        @app.workflow
        async def parent(n: int) -> int:
            return sum([await child(i) for i in range(n)])  # one child after another

        for attempt in range(5):  # the race it had lost most times
            handle = app.start(parent, 3, id=f"p-{attempt}")
            app.run_until_idle()
            assert app.client.get(handle.id).status is RunStatus.COMPLETED
            assert handle.result(timeout=0) == 6
    finally:
        app.close()
