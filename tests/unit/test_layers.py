"""The house keeps its shape: each layer of durably imports only the layers below it (so no
import runs back up and no circle can form), the engine never imports durably.testing, the
docs tooling stays out of the package, and no module is packed to look short.

Read from the source with `ast`, so a change that breaks a rule fails here with the file and
the import that broke it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import durably

PACKAGE = Path(durably.__file__).parent

# Lowest first; a module may import its own layer and the layers before it.
LAYERS = [
    ("errors", "durations", "clock"),
    ("core",),
    ("codec", "resilience"),
    ("stores",),
    ("workflow",),
    ("runtime",),
    ("client",),
    ("views",),
    ("observability", "testing"),
    ("starting",),
    ("app",),
    ("web", "demo"),
    ("cli", "__init__", "__main__"),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
ENGINE = ("core", "codec", "resilience", "stores", "workflow", "runtime", "client", "views")
MOST_LINES = 600


def _layer(module: str) -> str:
    """The layer of a module named from the package: durably.runtime.worker -> runtime."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> list[tuple[Path, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        found.append((path, ".".join(relative.parts).removesuffix(".__init__")))
    return found


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append((node.lineno, node.module))
            if node.module == "durably":  # from durably import <a module, or a name>
                names.extend((node.lineno, f"durably.{alias.name}") for alias in node.names)
    return names


MODULES = _modules()


def test_every_module_belongs_to_a_layer() -> None:
    unknown = {_layer(module) for _, module in MODULES} - set(RANK)
    assert not unknown, f"modules in no layer of this test's LAYERS: {sorted(unknown)}"


@pytest.mark.parametrize(("path", "module"), MODULES, ids=[module for _, module in MODULES])
def test_a_module_imports_only_its_layer_and_those_below(path: Path, module: str) -> None:
    own = RANK[_layer(module)]
    upward = [
        f"line {line}: {name} ({_layer(name)} is above {_layer(module)})"
        for line, name in _imports(path)
        if name.startswith("durably.")
        and _layer(name) in RANK
        and RANK[_layer(name)] > own
        and module != "durably"  # the public API re-exports from every layer
    ]
    assert not upward, f"{path.relative_to(PACKAGE.parent)} imports upward: {upward}"


@pytest.mark.parametrize(("path", "module"), MODULES, ids=[module for _, module in MODULES])
def test_the_engine_never_imports_testing_or_the_docs_tools(path: Path, module: str) -> None:
    bad = [
        (line, name)
        for line, name in _imports(path)
        if name.startswith("tools")
        or (_layer(module) in ENGINE and name.startswith("durably.testing"))
    ]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {bad}"


@pytest.mark.parametrize(("path", "module"), MODULES, ids=[module for _, module in MODULES])
def test_a_module_is_as_long_as_its_job_and_laid_out_by_the_formatter(
    path: Path, module: str
) -> None:
    text = path.read_text()
    assert text.count("\n") <= MOST_LINES, (
        f"{path.relative_to(PACKAGE.parent)} has {text.count(chr(10))} lines: cut it along "
        f"a job (at most {MOST_LINES})"
    )
    assert "fmt: skip" not in text, f"{path.relative_to(PACKAGE.parent)} packs lines"


def test_no_two_modules_differ_only_by_a_suffix() -> None:
    """approvals / approving, waits / waiting: one noun, one module per folder."""
    stems: dict[str, list[str]] = {}
    for path, module in MODULES:
        stem = path.stem
        if stem == "__init__":
            continue
        for suffix in ("ing", "s", "er", "ers"):
            if stem.endswith(suffix) and len(stem) > len(suffix) + 3:
                stem = stem.removesuffix(suffix)
                break
        stems.setdefault(f"{path.parent.name}/{stem}", []).append(module)
    alike = {key: found for key, found in stems.items() if len(found) > 1}
    assert not alike, f"modules of one folder whose names differ only by a suffix: {alike}"
