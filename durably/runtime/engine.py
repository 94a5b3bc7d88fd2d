"""What the runtime needs of an app, and nothing more: its definitions, its settings, its
store. The runtime never imports the App; `durably.App` is one Host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from durably.clock import Clock
from durably.core.retry import Retry
from durably.runtime.handoffs import Taker
from durably.runtime.hooks import Hooks
from durably.stores.protocol import Store
from durably.workflow.registry import Registry

__all__ = ["Engine", "Host", "Settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    """The app's settings as a worker found them when it started."""

    clock: Clock
    default_retry: Retry
    max_recoveries: int  # workers that may die under a run before it is parked
    seed: int | None  # for the retry jitter; None: unpredictable
    hooks: Hooks | None  # None: the engine makes no hook call at all
    retention: timedelta | None = None  # ended runs older than this are deleted by workers
    max_payload: int | None = None  # bytes an input, result or message may take as JSON


class Host(Protocol):
    """What a worker needs of the app it serves."""

    registry: Registry

    @property
    def store(self) -> Store: ...

    def settings(self) -> Settings: ...

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]: ...

    def offer(self, taker: Taker) -> Callable[[], None]: ...


@dataclass(frozen=True, slots=True)
class Engine:
    """Everything one run's execution uses of its app."""

    registry: Registry
    settings: Settings
    store: Store
    concurrency: int = 32  # the worker's: how many branches of a gather run at once at most
