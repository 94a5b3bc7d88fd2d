"""The app of the update tests: a cart that takes items by update while it waits for the
signal "checkout", then charges the total in a step.

`add_item(price)` (validator: a price is a whole number >= 0) appends to the cart and answers
the new total; `remove_last()` fails (its handler raises) on an empty cart; `total()` is a
query. `tally(total, rounds)` adds by update and continues as new on each "next" signal.
`slow_cart(seconds)` first runs a step that reports progress for `seconds` (so an
update comes in, and is folded into the history, while a step runs) before it waits. A real
`durably worker` process serves it in the crash test."""

from __future__ import annotations

import asyncio

import durably

__all__ = ["app", "define"]


def define(app: durably.App) -> durably.App:
    @app.step
    async def charge(total: int) -> str:
        return f"charged {total}"

    @app.step
    async def prepare(seconds: float) -> None:
        ticks = max(1, round(seconds / 0.05))
        for tick in range(ticks):
            durably.progress(tick + 1, ticks, "preparing")  # committed as it goes
            await asyncio.sleep(0.05)

    async def take_items(cart: list[int]) -> str:
        def check(price: int) -> None:
            if price < 0:
                raise ValueError(f"a price is never negative: {price}")

        @durably.update(validator=check)
        def add_item(price: int) -> int:
            cart.append(price)
            return sum(cart)

        @durably.update
        def remove_last() -> int:
            cart.pop()  # IndexError on an empty cart: the update is refused
            return sum(cart)

        @durably.query
        def total() -> int:
            return sum(cart)

        await durably.wait_for_signal("checkout")
        return await charge(sum(cart))  # type: ignore[no-any-return]

    @app.workflow(name="cart", version="1")
    async def cart(items: list[int]) -> str:
        return await take_items(list(items))

    @app.workflow(name="slow_cart", version="1")
    async def slow_cart(seconds: float) -> str:
        await prepare(seconds)
        return await take_items([])

    @app.workflow(name="tally", version="1")
    async def tally(total: int, rounds: int) -> int:
        state = [total]

        @durably.update
        def add(n: int) -> int:
            state[0] += n
            return state[0]

        await durably.wait_for_signal("next")
        if rounds > 1:
            durably.continue_as_new(state[0], rounds - 1)
        return state[0]

    return app


app = define(durably.App())  # the store: --store, or $DURABLY_STORE (a worker process's)
