"""Runs a worker cannot run, told once each: due runs of a workflow its app does not define,
and of a version of one it does not serve. They stay pending until a worker with their code
comes (or `durably upgrade` moves them to this code); the warning says so, and what to do."""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping

from durably.clock import Clock
from durably.runtime.committer import Committer
from durably.stores.protocol import Store

__all__ = ["Strays"]

log = logging.getLogger("durably.worker")


class Strays:
    """One worker's look for the due runs it cannot run: `known`, the workflows its app
    defines; `serves`, the versions of each it runs."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        known: Collection[str],
        serves: Mapping[str, Collection[str]],
    ) -> None:
        self._store = store
        self._clock = clock
        self._known = known
        self._serves = serves
        self._warned: set[str | tuple[str, str]] = set()  # told of already

    async def warn(self, committer: Committer) -> None:
        """Warn of each workflow, and each version, whose due runs wait for other code (once)."""
        store, now = self._store, self._clock.now()
        waiting = await committer.call(functools.partial(store.unclaimable, self._known, now=now))
        unserved = functools.partial(store.unserved, self._serves, now=now)
        for (name, version), count in (await committer.call(unserved)).items():
            if (name, version) not in self._warned:
                self._warned.add((name, version))
                log.warning(
                    "%d run(s) of workflow %r started on version %s are waiting, but this "
                    "worker runs version(s) %s of it; they stay pending until a worker with "
                    "their code runs, or until `durably upgrade` (or a worker started with "
                    "--upgrade) moves them to this code, each only if it replays their history",
                    *(count, name, version, ", ".join(self._serves[name])),
                )
        for name, count in waiting.items():
            if name not in self._warned:
                self._warned.add(name)
                log.warning(
                    "%d run(s) of workflow %r are waiting, but this worker does not know that "
                    "workflow; they stay pending. Import the module that defines it in the "
                    "worker's app. Known here: %s",
                    count,
                    name,
                    ", ".join(sorted(self._known)) or "none",
                )
