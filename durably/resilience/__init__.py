"""Protecting the services a workflow calls: circuit breakers, rate and concurrency limits.

Their state lives in the store (one small JSON document per gate, changed under the row's
lock), not in a worker's memory: in-process breaker libraries such as pybreaker or
aiobreaker cannot be shared by several worker processes on several machines, and a breaker
each worker keeps alone lets N workers hammer a failing service N times as hard.
The math is pure and lives here; the store only locks, reads and writes the document.
"""

from durably.resilience.gates import Breaker, Dependency, Enter, GateState, Wait

__all__ = ["Breaker", "Dependency", "Enter", "GateState", "Wait"]
