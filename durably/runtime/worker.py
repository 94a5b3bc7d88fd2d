"""The worker: claims due runs under a lease, executes them, renews its leases, stops cleanly;
between claims, its housekeeping (durably.runtime.housekeeping: schedules, retention).

Concurrency starts in `run()` / `run_until_idle()` and nowhere else. Its background tasks are
named; if one dies, the worker says so and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import signal
import threading
import time
from collections.abc import Collection
from datetime import datetime, timedelta

from durably.clock import Clock
from durably.core.queues import served_queues
from durably.core.replay import WorkerDeaths, fold_deaths
from durably.durations import Duration, parse_duration
from durably.errors import PayloadError, StoreUnavailable
from durably.runtime.committer import Committer
from durably.runtime.engine import Engine, Host
from durably.runtime.execution import RunExecution
from durably.runtime.handoffs import Handoffs
from durably.runtime.housekeeping import Housekeeping
from durably.runtime.neighbours import default_name, gone_here
from durably.runtime.strays import Strays
from durably.runtime.suspects import Suspects
from durably.runtime.takeovers import first_claim, taken_over_from
from durably.runtime.webhooks import Courier
from durably.stores.protocol import Store
from durably.stores.records import Claim, Lease, WorkerBeat

__all__ = ["Worker"]

log = logging.getLogger("durably.worker")

# How often a worker says it is alive: three beats missed, it is presumed dead (at most a
# third of its lease, which it renews every third)
_BEAT = timedelta(seconds=1)
_UNKNOWN_CHECK_EVERY = 10  # idle polls between checks for runs of workflows nobody knows
_OPEN_RETRY_FIRST = timedelta(milliseconds=250)  # pauses between tries to open the store
_OPEN_RETRY_MAX = timedelta(seconds=5)
# How often a worker looks for messages sent to the runs it is running (a cancel, a pause):
# one indexed read of their inbox counts, and only while it holds any.
_MAIL_EVERY = timedelta(seconds=1)


class Worker:
    def __init__(
        self,
        app: Host,
        *,
        concurrency: int = 32,
        lease: Duration = "10s",
        poll: Duration = "200ms",
        stop_grace: Duration = "10s",
        name: str | None = None,
        queues: Collection[str] | None = None,
        webhook_timeout: Duration | None = "10s",
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.app = app
        # The queues it takes runs from (durably.core.queues): these, or all its app's.
        self.queues = served_queues(app.registry.queues, queues)
        self.concurrency = concurrency
        self.lease = parse_duration(lease, what="lease")
        if self.lease < timedelta(seconds=1):
            raise ValueError("lease must be at least 1s: heartbeats renew it every third of it")
        self.poll = parse_duration(poll, what="poll")
        self.stop_grace = parse_duration(stop_grace, what="stop_grace")
        # Each webhook delivery's send waits this long for an answer (None: this worker sends
        # none; the other workers do).
        self.webhook_timeout = (
            None
            if webhook_timeout is None
            else parse_duration(webhook_timeout, what="webhook_timeout")
        )
        # A name given by the caller identifies this worker across restarts: runs still
        # leased to it belonged to a previous incarnation, now dead, and are recovered at
        # once. Two live workers must never share a name.
        self.recovers_own = name is not None
        self.name = name or default_name()
        # how often it says it is alive: three beats missed, it is presumed dead
        self.beat = min(_BEAT, self.lease / 3)
        self._buried: set[str] = set()  # workers on this machine found dead, leases ended
        self.completed = 0  # runs this worker took to an end (any final or parked state)
        self._settings = app.settings()  # as the app had them when the worker was made
        self._clock: Clock = self._settings.clock
        self._engine: Engine | None = None  # once the store is open
        self._active: dict[str, tuple[RunExecution, asyncio.Task[None]]] = {}
        # Runs taken over from a dead worker, which run alone, one turn after another, so
        # that a death while one runs is its own (see WorkerDeaths). Their leases are kept.
        self._suspects = Suspects(launch=self._launch, poke=self._poke)
        # The last claim took as many runs as it asked for: more may be due. True until a
        # claim comes back short (a start is handed over only when nothing else waits).
        self._filled = True
        self._claiming = 0  # slots the claim under way may fill
        self._handoffs: Handoffs | None = None  # while it serves: runs handed over at their start
        # Set while it serves, from its first claim on: the runs this app starts from then on
        # that it can run at once are handed to it at their start.
        self.serving = threading.Event()
        self._stopping = False
        self._draining = False  # it works until nothing is due (run_until_idle)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._committer: Committer | None = None  # while it serves
        self._serves: dict[str, tuple[str, ...]] = {}
        self._started_at = self._clock.now()

    # -- entry points -------------------------------------------------------------------

    def run(self) -> None:
        """Work until SIGTERM or SIGINT, then finish or hand back what is held."""
        self._stopping = False  # here, not in serve(): a stop while the store opens counts
        asyncio.run(self._run_with_signals())

    def run_until_idle(self) -> int:
        """Work until no run is due; return how many runs were taken to an end."""
        return asyncio.run(self.drain())

    async def drain(self) -> int:
        self._stopping = False
        before = self.completed
        await self.serve(until_idle=True)
        return self.completed - before

    def stop(self) -> None:
        """Stop claiming; held runs get `stop_grace` to finish, then are handed back."""
        self._stopping = True
        if self._committer is not None:  # a store that is down: waited for that long, no more
            self._committer.give_up_after(self.stop_grace.total_seconds())
        self._poke()

    async def serve(self, *, until_idle: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._draining = until_idle
        # A drain (a script, a test) says at once that the store is down; a long-lived
        # worker waits for it.
        store = self.app.store if until_idle else await self._open_store()
        if store is None:
            return  # stopped before the store could be reached
        self._engine = Engine(self.app.registry, self._settings, store, self.concurrency)
        self._serves = self.app.registry.serves()  # the versions of each workflow it runs
        housekeeping = Housekeeping(
            self.name,
            store,
            self._clock,
            schedules=self.app.registry.schedules,
            retention=self._settings.retention,
            poll=self.poll,
            wake_at=self._wake_at,
        )
        strays = Strays(store, self._clock, self.app.registry.workflow_names(), self._serves)
        self._started_at = self._clock.now()
        committer = Committer(
            store,
            self._clock,
            solo=self._solo,
            hooks=self._settings.hooks,
            lanes=store.writers,
        )
        committer.start(self._loop)
        self._committer = committer
        unsubscribe = self.app.subscribe(self._poke_threadsafe)
        self._filled = True
        handoffs = Handoffs(
            self.name,
            self.lease,
            self._serves,
            self.queues,
            self._loop,
            room=self._room,
            launch=self._start,
        )
        self._handoffs = handoffs
        withdraw = self.app.offer(handoffs)
        # A drain ends when nothing is due; only a long-lived worker waits to be woken.
        unwatch = _deaf if until_idle else store.watch(self._poke_threadsafe)
        heartbeat = asyncio.create_task(
            self._heartbeat(committer), name=f"durably-heartbeat-{self.name}"
        )
        heartbeat.add_done_callback(self._background_done)
        mail = asyncio.create_task(self._read_mail(committer), name=f"durably-mail-{self.name}")
        mail.add_done_callback(self._background_done)
        background = [heartbeat, mail]
        if not until_idle and self.webhook_timeout:  # webhook deliveries, in threads of their own
            timeout = self.webhook_timeout
            courier = Courier(store, self._clock, hooks=self._settings.hooks, timeout=timeout)
            sending = asyncio.create_task(courier.run(), name=f"durably-webhooks-{self.name}")
            sending.add_done_callback(self._background_done)
            background.append(sending)
        idle_polls = 0
        try:
            await self._beat(committer)
            if self.recovers_own:
                await self._recover_own(committer)
            while not self._stopping:
                await housekeeping.run_schedules(committer)
                claims = await self._claim(committer)
                self.serving.set()
                await housekeeping.prune(committer, idle=not claims and not self._active)
                idle = not claims and not self._active and not self._suspects
                if until_idle and idle and not handoffs.held:
                    await strays.warn(committer)
                    break
                if claims and self._filled and self._free() > 0 and not self._suspects.isolating():
                    continue  # it took all it asked for, and slots freed since: more may be due
                if not claims:
                    idle_polls += 1
                    if idle_polls % _UNKNOWN_CHECK_EVERY == 1:
                        await strays.warn(committer)
                await self._wait_for_work()
        except StoreUnavailable:
            if not self._stopping:
                raise
            log.warning(
                "worker %s stopped with its store down: its runs wait out their leases", self.name
            )
        finally:
            self.serving.clear()
            withdraw()
            unsubscribe()
            unwatch()
            # Runs started for it before it withdrew: held, finished or handed back below.
            await handoffs.arrived(within=self.stop_grace)
            with contextlib.suppress(StoreUnavailable):  # hand-backs: as above
                await self._shutdown()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            with contextlib.suppress(StoreUnavailable):  # it is presumed dead in time anyway
                await committer.call(functools.partial(store.forget_worker, self.name))
            committer.stop()
        if self._failure is not None:
            raise self._failure

    async def _open_store(self) -> Store | None:
        """The app's store, opened in a thread. While it cannot be reached (the database is
        down, or not up yet), say why and try again with backoff: a worker started before its
        database, or restarted during an outage, carries on once the store is back. None if
        the worker is stopped first."""
        delay = _OPEN_RETRY_FIRST
        while True:
            try:
                return await asyncio.to_thread(lambda: self.app.store)
            except StoreUnavailable as exc:
                if self._stopping:
                    return None
                log.warning(
                    "worker %s: cannot open the store, trying again in %.2fs: %s",
                    self.name,
                    delay.total_seconds(),
                    exc,
                )
            await asyncio.sleep(delay.total_seconds())
            if self._stopping:
                return None
            delay = min(delay * 2, _OPEN_RETRY_MAX)

    # -- the loop -----------------------------------------------------------------------

    async def _recover_own(self, committer: Committer) -> None:
        assert self._engine is not None
        store = self._engine.store
        expire = functools.partial(store.expire_leases, self.name, now=self._clock.now())
        if recovered := await committer.call(expire):
            log.info("worker %s: recovering %d run(s) its last run left", self.name, recovered)

    async def _claim(self, committer: Committer) -> list[Claim]:
        """Claim due runs and start them; none while a suspect waits or runs alone."""
        if self._suspects.isolating():
            self._suspects.start(others_running=bool(self._active))
            return []
        handoffs = self._handoffs
        assert handoffs is not None
        if self._free() <= 0:
            self._filled = True  # full: a slot that frees claims again
            return []
        assert self._engine is not None
        serves, store, clock = self._serves, self._engine.store, self._clock
        asked = 0

        def claim_due() -> list[Claim]:
            nonlocal asked
            # Its free slots, counted as it runs: against the runs handed over meanwhile,
            # which count against it while it runs (in the claim's thread, to keep the while
            # short: a start in it goes the usual way).
            with handoffs.lock:
                asked = self._claiming = self._free()
            if asked <= 0:
                return []
            # The time is read when the claim runs, after the checkpoints queued before it are
            # committed: a run one of them made due (a child it started, a parent it woke) is
            # due by then, so a drain does not stop short of it.
            began = time.perf_counter()
            claims: list[Claim] = []
            try:
                claims = store.claim(
                    self.name,
                    serves,
                    now=clock.now(),
                    lease=self.lease,
                    limit=asked,
                    queues=self.queues,
                )
            finally:
                self._claiming = len(claims)  # taken, not running yet: still counted
            if self._settings.hooks is not None:
                self._settings.hooks.claim_made(len(claims), time.perf_counter() - began)
            return claims

        try:
            claims = await committer.call(claim_due)
            # Fewer than it asked for: nothing more was due. Claiming again at once would only
            # put an empty claim ahead of its new runs' first commits (a queue hop paid ~0.5 ms
            # for it). None asked for: it was full.
            self._filled = len(claims) >= asked
            for claim in claims:
                self._start(claim)
        finally:
            self._claiming = 0
        self._suspects.start(others_running=bool(self._active))
        return claims

    def _start(self, claim: Claim) -> None:
        """Run a run it claimed (or was handed at its start), or set it aside to run alone
        if a worker died running it."""
        assert self._engine is not None
        assert self._committer is not None
        assert self._loop is not None
        execution = RunExecution(claim, self._engine, self._committer, self._loop)
        try:
            deaths = fold_deaths(claim.events)
        except PayloadError:  # an unreadable history: its execution parks the run
            deaths = WorkerDeaths()
        if self._settings.hooks is not None:
            takeover = taken_over_from(claim.events) is not None
            self._settings.hooks.claimed(claim.run_id, claim.workflow, takeover=takeover)
            if first_claim(claim.events):
                self._settings.hooks.run_began(claim.run_id, claim.workflow)
        if deaths.suspect:
            self._suspects.add(execution, strict=deaths.strict)
        else:
            self._launch(execution)

    def _solo(self) -> bool:
        """Whether one run is in flight here, and it makes one call at a time (not in a
        durably.gather): its checkpoints are then committed inline, with no batch to wait for."""
        if len(self._active) > 1:
            return False
        return not any(execution.gathering for execution, _ in self._active.values())

    def _free(self) -> int:
        held = 0 if self._handoffs is None else self._handoffs.held
        return self.concurrency - len(self._active) - len(self._suspects) - held

    def _room(self, held: int) -> bool:
        """Whether it would claim a new run now, with a slot free beyond the `held` ones and
        the claim under way's (asked from a starting thread, under the hand-overs' lock)."""
        if self._stopping or self._filled or self._suspects.isolating():
            return False
        return self.concurrency - len(self._active) - len(self._suspects) - self._claiming > held

    def _launch(self, execution: RunExecution) -> None:
        run_id = execution.run_id
        if stale := self._active.get(run_id):
            # This worker stalled past its own lease and claimed the run again: the older
            # execution's epoch is gone, so it could write nothing; stop it.
            stale[0].lost = True
            stale[1].cancel()
        task = asyncio.create_task(execution.run(), name=f"durably-run-{run_id}")
        self._active[run_id] = (execution, task)
        task.add_done_callback(functools.partial(self._run_done, run_id))

    def _run_done(self, run_id: str, task: asyncio.Task[None]) -> None:
        entry = self._active.get(run_id)
        if entry is None or entry[1] is not task:
            return  # a stale execution of a run claimed again
        execution, _ = self._active.pop(run_id)
        self._suspects.ended(execution)
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                log.error("run %s: the worker failed while executing it: %r", run_id, error)
            elif execution.suspended:
                if execution.wake_at is not None:
                    self._wake_at(execution.wake_at)
            elif not execution.lost:
                self.completed += 1
        # A slot freed matters to a worker that was full, or a drain (which hears of runs its
        # own commits made due only by looking); a worker that serves is told of due runs.
        if self._filled or self._suspects or self._stopping or self._draining:
            self._poke()

    def _wake_at(self, due: datetime) -> None:
        """Claim a run that waits (a retry's backoff, a timer) back as soon as it is due."""
        assert self._loop is not None
        delay = max(0.0, (due - self._clock.now()).total_seconds())
        if delay < 3600:
            self._loop.call_later(delay, self._poke)

    async def _wait_for_work(self) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.poll.total_seconds())
        self._wake.clear()

    async def _beat(self, committer: Committer) -> None:
        """Say this worker is alive, and what it serves (`durably workers`)."""
        queues = tuple(queue.name for queue in self.queues)
        beat = WorkerBeat(
            self.name, self._started_at, self._clock.now(), self.beat, self._serves, queues
        )
        await committer.call(functools.partial(self.app.store.beat, beat))

    async def _heartbeat(self, committer: Committer) -> None:
        """Every beat: say it is alive, and look for dead workers on this machine; every
        third of the lease: renew the leases it holds."""
        beats_a_renewal = max(1, round(self.lease / 3 / self.beat))
        for count in itertools.count(1):
            await asyncio.sleep(self.beat.total_seconds())
            await self._beat(committer)
            await self._bury_neighbours(committer)
            if count % beats_a_renewal == 0:
                await self._renew(committer)

    async def _bury_neighbours(self, committer: Committer) -> None:
        """End the leases of workers of this machine whose process is gone: their runs are
        taken over now, not when their leases expire (durably.runtime.neighbours)."""
        workers = await committer.call(self.app.store.workers)
        for worker in workers:
            if worker.name in self._buried or not gone_here(worker.name):
                continue
            expire = functools.partial(
                self.app.store.expire_leases, worker.name, now=self._clock.now()
            )
            ended = await committer.call(expire)
            self._buried.add(worker.name)
            if ended:
                log.warning(
                    "worker %s: worker %s on this machine is gone (its process is no more); "
                    "%d run(s) it held are taken over now",
                    *(self.name, worker.name, ended),
                )
                self._poke()

    async def _renew(self, committer: Committer) -> None:
        running = [execution for execution, _ in self._active.values()]
        held = [execution for execution in [*running, *self._suspects] if not execution.lost]
        if not held:
            return
        leases = [Lease(execution.run_id, execution.epoch) for execution in held]
        renew = functools.partial(
            self.app.store.renew, leases, now=self._clock.now(), lease=self.lease
        )
        kept = await committer.call(renew)
        for execution in held:
            if execution in self._suspects and execution.run_id not in kept:
                execution.lost = True  # it never started: dropped when its turn comes
                continue
            # a run that ended while the renewal was under way is simply gone
            gone = execution.closed or execution.run_id not in self._active
            if execution.run_id not in kept and not gone:
                log.warning("run %s: lease lost to another worker; abandoning it", execution.run_id)
                execution.lost = True
                self._active[execution.run_id][1].cancel()

    async def _read_mail(self, committer: Committer) -> None:
        """Hand the runs this worker is running the messages sent to them meanwhile."""
        while True:
            await asyncio.sleep(_MAIL_EVERY.total_seconds())
            running = {
                run_id: execution
                for run_id, (execution, _) in self._active.items()
                if not execution.closed and not execution.lost
            }
            if not running:
                continue
            try:
                mail = await committer.call(functools.partial(self.app.store.mail, list(running)))
            except StoreUnavailable as exc:  # the next look tries again
                log.warning("worker %s: cannot read its runs' messages: %s", self.name, exc)
                continue
            for run_id, inbox in mail.items():
                execution = self._active.get(run_id, (None, None))[0]
                if execution is not None:
                    execution.deliver(inbox)

    async def _shutdown(self) -> None:
        await self._suspects.hand_back()
        tasks = [task for _, task in self._active.values()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.stop_grace.total_seconds())
        for task in pending:
            task.cancel()  # the execution hands its run back before it ends
        await asyncio.gather(*pending, return_exceptions=True)
        if pending:
            log.info("worker %s handed back %d run(s) on stop", self.name, len(pending))

    def _background_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "worker %s: background task %s died: %r; stopping",
                self.name,
                task.get_name(),
                error,
            )
            self._failure = error
            self.stop()

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        if await self._open_store() is None:  # waits while the store cannot be reached
            return
        log.info(
            "worker %s started (concurrency %d) on %s",
            self.name,
            self.concurrency,
            self.app.store.url,
        )
        await self.serve()
        log.info("worker %s stopped", self.name)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _poke_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._poke)


def _deaf() -> None:
    """The stop call of a watch that was never started."""
