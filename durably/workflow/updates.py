"""`@durably.update`: a handler that changes a running workflow's state, called with the
arguments a caller sends (`handle.update(name, *args)`), whose value the caller gets back.

    @app.workflow
    async def order(items: list[dict]) -> dict:
        cart = list(items)

        def check(item: dict) -> None:
            if item["price"] < 0:
                raise ValueError("a price is never negative")

        @durably.update(validator=check)
        def add_item(item: dict) -> int:
            cart.append(item)
            return sum(i["price"] for i in cart)

        await durably.wait_for_signal("checkout")
        ...

The handler runs in workflow code, at the workflow's next durable call after the update came
(durably.core.updates): it must be a plain `def` that changes the body's variables and
returns; it awaits nothing and calls no step. The validator (optional) runs first and refuses
the update by raising: then nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from durably.core.names import check_name
from durably.workflow.context import here

__all__ = ["update"]

F = TypeVar("F", bound=Callable[..., Any])


@overload
def update(fn: F, /) -> F: ...


@overload
def update(
    fn: str | None = None,
    /,
    *,
    name: str | None = None,
    validator: Callable[..., Any] | None = None,
) -> Callable[[F], F]: ...


def update(
    fn: F | str | None = None,
    /,
    *,
    name: str | None = None,
    validator: Callable[..., Any] | None = None,
) -> F | Callable[[F], F]:
    """Register an update handler in workflow code: `@durably.update` (named after the
    function), `@durably.update("name")`, `@durably.update(validator=check)`."""
    if isinstance(fn, str):
        return update(name=fn, validator=validator)
    if fn is None:
        return lambda handler: _register(handler, name, validator)
    return _register(fn, name, validator)


def _register(handler: F, name: str | None, validator: Callable[..., Any] | None) -> F:
    execution = here("update")
    chosen = check_name(
        name if name is not None else getattr(handler, "__name__", ""), "an update's name"
    )
    execution.updates.register(chosen, handler, validator)
    return handler
