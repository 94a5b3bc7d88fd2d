"""A workflow's default version: a hash of its code's tokens and of the registered names of
the steps it calls. Comments, blank lines and indentation do not count; code does."""

from __future__ import annotations

import textwrap
from typing import Any

import durably
from durably.workflow.definitions import Step, Workflow
from durably.workflow.versions import code_version


def _named(thing: object) -> str | None:
    return thing.name if isinstance(thing, Step | Workflow) else None


def _define(source: str, **scope: Any) -> Any:
    """A function made from `source`, with its source findable (as a module's is)."""
    import linecache

    filename = f"<durably-test-{abs(hash(source))}>"
    text = textwrap.dedent(source)
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict[str, Any] = dict(scope)
    exec(compile(text, filename, "exec"), namespace)
    return namespace["flow"]


PLAIN = """
async def flow(order):
    charged = await charge(order)
    return charged
"""

COMMENTED = """
async def flow(order):
    # charge first: the card is the scarce thing
    charged = await charge(order)


    return charged   # and done
"""

CHANGED = """
async def flow(order):
    charged = await charge(order)
    return [charged]
"""


def test_comments_and_blank_lines_do_not_change_the_version() -> None:
    app = durably.App("sqlite:///unused.db")
    charge = app.step(lambda order: order, name="charge")
    assert code_version(_define(PLAIN, charge=charge), _named) == code_version(
        _define(COMMENTED, charge=charge), _named
    )


def test_a_change_of_code_or_of_a_called_steps_name_does() -> None:
    app = durably.App("sqlite:///unused.db")
    charge = app.step(lambda order: order, name="charge")
    renamed = app.step(lambda order: order, name="charge_card")
    plain = code_version(_define(PLAIN, charge=charge), _named)

    assert code_version(_define(CHANGED, charge=charge), _named) != plain
    assert code_version(_define(PLAIN, charge=renamed), _named) != plain
    assert len(plain) == 12
    assert int(plain, 16) >= 0  # hex


def test_steps_named_through_a_closure_count_too() -> None:
    app = durably.App("sqlite:///unused.db")

    def build(name: str) -> Workflow:
        @app.step(name=name)
        async def pay(order: str) -> str:
            return order

        async def flow(order: str) -> str:
            return await pay(order)  # type: ignore[no-any-return]

        return Workflow(flow, "flow")

    assert build("pay").version != build("pay_card").version


def test_an_explicit_version_wins_and_versions_add_older_ones() -> None:
    app = durably.App("sqlite:///unused.db")

    @app.workflow(version="2025-06-a", versions=["2025-05-b"])
    async def shipping() -> None: ...

    assert shipping.version == "2025-06-a"
    assert shipping.serves == {"2025-06-a", "2025-05-b"}
    assert app.registry.serves() == {"shipping": ("2025-05-b", "2025-06-a")}


def test_a_function_without_source_still_gets_a_version() -> None:
    namespace: dict[str, Any] = {}
    exec("async def flow():\n    return 1\n", namespace)  # no source to read back
    version = code_version(namespace["flow"], _named)
    assert len(version) == 12
