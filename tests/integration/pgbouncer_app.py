"""The app real `durably worker` processes serve behind PgBouncer (test_pgbouncer): a run of
many steps, an event, a signal and a transactional step, so that each of durably's statements
runs many times over, on client connections that share a few server connections."""

from __future__ import annotations

import durably


def make_app(store: str | None = None) -> durably.App:
    app = durably.App(store)  # None: $DURABLY_STORE, as the worker process gets it

    @app.step
    async def add(total: int, amount: int) -> int:
        return total + amount

    @app.transaction
    def record(key: str, total: int) -> None:
        durably.connection().execute(
            "INSERT INTO pgb_ledger (key, total) VALUES (%s, %s)", (key, total)
        )

    @app.workflow
    async def tally(key: str, start: int) -> int:
        total = start
        for amount in range(1, 7):
            total = await add(total, amount)
        durably.set_event("stage", "added")
        bonus: int = await durably.wait_for_signal("go")
        await record(key, total + bonus)
        return total + bonus

    @app.workflow
    async def quick(n: int) -> int:
        return await add(n, 1)

    return app


app = make_app()
