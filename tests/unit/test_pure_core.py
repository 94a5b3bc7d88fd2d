"""The pure core imports no I/O: no database driver, no event loop, no threads, no clock.

The core is `durably/core/` and the other pure logic: the retry math (`durably/core/retry.py`)
and the breaker and limit arithmetic (`durably/resilience/gates.py`)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import durably.core

CORE = Path(durably.core.__file__).parent
CORE_MODULES = sorted(
    [f"durably.core.{path.stem}" for path in CORE.glob("*.py") if path.stem != "__init__"]
    + ["durably.core.retry", "durably.resilience.gates"]
)
FORBIDDEN = ("sqlite3", "psycopg", "asyncio", "threading", "time", "durably.stores")

# The probe imports the core without durably/__init__.py (which pulls in the whole engine, as
# a package's public API does): a stand-in `durably` package whose path is the real one.
_PROBE = """
import json, sys, types
before = set(sys.modules)
package = types.ModuleType("durably")
package.__path__ = [{package_dir!r}]
sys.modules["durably"] = package
for name in {modules!r}:
    __import__(name)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_there_is_a_core_to_check() -> None:
    assert {
        "durably.core.history",
        "durably.core.payloads",
        "durably.core.replay",
        "durably.core.status",
        "durably.core.retry",
        "durably.resilience.gates",
    } <= set(CORE_MODULES)


def test_importing_the_core_loads_no_io_module() -> None:
    probe = _PROBE.format(package_dir=str(CORE.parent), modules=CORE_MODULES)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(done.stdout))
    assert set(CORE_MODULES) <= loaded
    offenders = sorted(
        name
        for name in loaded
        if any(name == bad or name.startswith(f"{bad}.") for bad in FORBIDDEN)
    )
    assert offenders == []


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_source_imports_no_io_module(module: str) -> None:
    """`time` is loaded by every interpreter at start-up, so sys.modules cannot show it; the
    source can."""
    path = CORE.parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    offenders = sorted(
        name
        for name in imported
        if any(name == bad or name.startswith(f"{bad}.") for bad in (*FORBIDDEN, "durably.runtime"))
    )
    assert offenders == []
