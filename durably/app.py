"""App: the registry of workflows and steps; its client calls (start, runs, a person's
actions) are those of its `client`, the one client API of durably.client.client."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar, overload

from durably.client.client import Client
from durably.client.handles import RunHandle
from durably.clock import Clock, SystemClock
from durably.codec.encoding import DEFAULT_MAX_PAYLOAD, check_limit
from durably.core.audit import Via
from durably.core.names import check_name
from durably.core.priority import check_priority
from durably.core.queues import DEFAULT_QUEUE, Queue, check_slots, parse_rate
from durably.core.retry import Retry
from durably.core.schedules import Spec
from durably.core.secrets import add_names as add_secret_names
from durably.durations import Duration, parse_duration
from durably.errors import ConfigError
from durably.resilience import Dependency
from durably.runtime.engine import Settings
from durably.runtime.handoffs import Taker
from durably.runtime.hooks import Hooks, chain
from durably.runtime.schedules import Schedules
from durably.runtime.upgrades import Upgrade, upgrade
from durably.runtime.worker import Worker
from durably.starting import Starting
from durably.stores import Store, may_migrate, open_store, resolve_url
from durably.workflow.definitions import Schedule, Step, StepOptions, Workflow
from durably.workflow.registry import Registry

__all__ = ["App", "RunHandle"]

F = TypeVar("F", bound=Callable[..., Any])


class App(Starting):
    """Workflows and steps bound to one store.

    `store` is a URL (sqlite:///file.db, postgresql://...), a Store, or None for
    $DURABLY_STORE or ./durably.db. The store is opened on first use. `redact`: names of
    fields and parameters whose values are secrets, besides password, token, api_key,
    card_number and the others durably knows (docs/how-to/redaction.md): never shown.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        clock: Clock | None = None,
        default_retry: Retry | None = None,
        max_recoveries: int = 5,
        seed: int | None = None,
        hooks: Hooks | Sequence[Hooks] | None = None,
        retention: Duration | None = None,
        max_payload: int | None = DEFAULT_MAX_PAYLOAD,
        redact: Collection[str] = (),
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        # more names whose values are secrets, besides durably.core.secrets.SECRET_NAMES
        add_secret_names(_names(redact))
        self.default_retry = default_retry or Retry()
        _check_recoveries(max_recoveries)
        self.max_recoveries = max_recoveries  # workers that may die under a run before parking
        self.seed = seed  # for the retry jitter; None: unpredictable
        # ended runs older than this are deleted by the workers (None: kept for ever)
        self.retention = None if retention is None else _retention(retention)
        self.hooks: list[Hooks] = [hooks] if isinstance(hooks, Hooks) else list(hooks or ())
        self.registry = Registry()
        self._store: Store | None = store if not isinstance(store, str | None) else None
        self._url = None if self._store is not None else resolve_url(store)  # type: ignore[arg-type]
        self._open_lock = threading.Lock()
        # Every client call goes through it: validation, wake-ups, the audit trail.
        self.max_payload = check_limit(max_payload)  # bytes an input or result may take
        self.client = Client(
            lambda: self.store, registry=self, clock=self.clock, max_payload=max_payload
        )

    # -- definitions --------------------------------------------------------------------

    @overload
    def workflow(self, fn: Callable[..., Any], /) -> Workflow: ...
    @overload
    def workflow(
        self,
        /,
        *,
        name: str | None = None,
        deadline: Duration | None = None,
        max_recoveries: int | None = None,
        priority: int | None = None,
        version: str | None = None,
        versions: Collection[str] = (),
        queue: str | None = None,
    ) -> Callable[[Callable[..., Any]], Workflow]: ...

    def workflow(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        deadline: Duration | None = None,
        max_recoveries: int | None = None,
        priority: int | None = None,
        version: str | None = None,
        versions: Collection[str] = (),
        queue: str | None = None,
    ) -> Workflow | Callable[[Callable[..., Any]], Workflow]:
        """Register a workflow. Its name (default: the function's) is what runs record.

        `deadline`: once this long has passed since the run started, it stops, its
        completed steps are compensated, and it ends `timed_out`. `max_recoveries`: how
        many workers may die under one of its runs before it is parked as a poison pill
        (default: the app's). `priority`: its runs' priority (0 to 1,000) when their start
        names none; a level is a minute's head start in the claim order
        (durably.core.priority). Default: 0, or for a child run its parent's.
        `version`: what its runs are pinned to when they start (default: a hash of its code,
        durably.workflow.versions); a worker claims only runs of the versions its code serves: its
        own and the older ones listed in `versions` (changes made compatible with
        durably.patched). `queue`: the queue its runs go on when their start names none
        (default: the default queue); declare it with `app.queue`.
        """
        limit = None if deadline is None else parse_duration(deadline, what="deadline")
        _check_recoveries(max_recoveries)
        if priority is not None:
            check_priority(priority, what="@app.workflow(priority=...)")
        if isinstance(versions, str):
            raise ConfigError(f"versions= is a list of versions, not the string {versions!r}")
        for given in (version, *versions):
            if given is not None and (not isinstance(given, str) or not given.strip()):
                raise ConfigError(f"a workflow version is a non-empty string, not {given!r}")

        def register(fn: Callable[..., Any]) -> Workflow:
            chosen = name or str(getattr(fn, "__name__", ""))
            definition = Workflow(
                fn,
                chosen,
                deadline=limit,
                max_recoveries=max_recoveries,
                priority=priority,
                version=version,
                versions=versions,
                queue=None if queue is None else check_name(queue, "a queue's name"),
            )
            return self.registry.add_workflow(definition)

        return register if fn is None else register(fn)

    @overload
    def step(self, fn: Callable[..., Any], /) -> Step: ...
    @overload
    def step(
        self,
        /,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        key: Callable[..., str] | None = None,
        dependency: str | None = None,
        dependency_key: Callable[..., str] | None = None,
        heartbeat_timeout: Duration | None = None,
    ) -> Callable[[Callable[..., Any]], Step]: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        key: Callable[..., str] | None = None,
        dependency: str | None = None,
        dependency_key: Callable[..., str] | None = None,
        heartbeat_timeout: Duration | None = None,
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """Register a step: a call whose outcome is checkpointed and never re-run once recorded.

        `retry`: its Retry policy (default: the app's). `timeout`: per attempt; a timed-out
        attempt is unknown and is reconciled before the next one. `key`: derive the
        idempotency key from the step's arguments (default: run id, position and name).
        `dependency`: the service it calls, for circuit breakers and limits.
        `dependency_key`: the account at that service a call uses, from the step's arguments
        (like `key`): each account gets its own breaker, rate and concurrency slots, under
        the dependency's policy (e.g. a partner's limit of 5 calls a second per API key).
        `heartbeat_timeout`: a long step calls durably.heartbeat() as it goes; an attempt
        whose heartbeats stop this long is lost like a timed-out one (reconciled, retried).
        """
        beats = heartbeat_timeout
        options = StepOptions(
            retry=retry,
            timeout=None if timeout is None else parse_duration(timeout, what="timeout"),
            key=key,
            dependency=dependency,
            dependency_key=dependency_key,
            heartbeat_timeout=None
            if beats is None
            else parse_duration(beats, what="heartbeat_timeout"),
        )

        def register(fn: Callable[..., Any]) -> Step:
            chosen = name or str(getattr(fn, "__name__", ""))
            return self.registry.add_step(Step(fn, chosen, options))

        return register if fn is None else register(fn)

    @overload
    def transaction(self, fn: Callable[..., Any], /) -> Step: ...
    @overload
    def transaction(
        self,
        /,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
    ) -> Callable[[Callable[..., Any]], Step]: ...

    def transaction(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """Register a transactional step: a plain `def` that writes the app's own tables in
        the store's database through `durably.connection()`, in the same transaction that
        records the step's outcome. Both commit or neither: no crash can leave the writes
        without the outcome (or the outcome without the writes). Raise to roll back; a failed
        attempt is retried like a step's (`retry`, default the app's). `timeout`: per attempt,
        unless its transaction has begun committing by then. The body runs in a thread on a
        connection of the store's: on SQLite every other write waits for it, so keep it short.
        """
        options = StepOptions(
            retry=retry,
            timeout=None if timeout is None else parse_duration(timeout, what="timeout"),
            transactional=True,
        )

        def register(fn: Callable[..., Any]) -> Step:
            chosen = name or str(getattr(fn, "__name__", ""))
            if inspect.iscoroutinefunction(fn):
                raise ConfigError(
                    f"@app.transaction {chosen!r} is an async def: a transactional step is a "
                    "plain def, run in a thread on the store's connection (which is not async)"
                )
            return self.registry.add_step(Step(fn, chosen, options))

        return register if fn is None else register(fn)

    def schedule(
        self,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup: str = "latest",
        jitter: Duration | None = None,
        name: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        tick: str | None = None,
    ) -> Callable[[Workflow], Workflow]:
        """Start the workflow below on a schedule: `cron` (in `timezone`, daylight saving
        followed as cron does) or `every` (ticks at whole multiples of it since the epoch).
        Exactly one run per tick, whatever the number of workers (its id is the tick's).
        `overlap` when the previous run has not ended: "skip" it, "queue" it until then, or
        "allow" it. `catchup` after downtime: the "latest" missed tick only, or "all" of them.
        `jitter`: each tick starts a fixed delay in [0, jitter) later. The runs get `args`
        and `kwargs`, and the tick's time (UTC) as the parameter named `tick`, if given.
        Workers run the schedules of their app; `app.schedules` and `durably schedules`
        list, pause, resume, trigger and backfill them."""
        spec = Spec(
            workflow="",
            cron=cron,
            every=None if every is None else _seconds(every, "every"),
            timezone=timezone,
            jitter=0.0 if jitter is None else _seconds(jitter, "jitter"),
            overlap=overlap,
            catchup=catchup,
        )

        def register(workflow: Workflow) -> Workflow:
            if not isinstance(workflow, Workflow):
                raise ConfigError(
                    "@app.schedule goes above @app.workflow: it schedules a workflow, not "
                    f"{workflow!r}"
                )
            named = replace(spec, workflow=workflow.name)
            scheduled = Schedule(name or workflow.name, workflow, named, tuple(args), kwargs, tick)
            scheduled.input(self.clock.now())  # PayloadError now, not at the first tick
            self.registry.add_schedule(scheduled)
            return workflow

        return register

    @property
    def schedules(self) -> Schedules:
        """The app's schedules in its store: list, pause, resume, trigger, backfill."""
        return Schedules(self.store, self.registry, self.clock)

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        concurrency_per_key: int | None = None,
        fair: bool = True,
        rate: str | None = None,
        rate_per_key: str | None = None,
    ) -> Queue:
        """Declare a queue (durably.core.queues). Its runs go to the workers that serve it
        (`durably worker --queues`); at most `concurrency` of them hold a worker at once, and
        at most `concurrency_per_key` of one key (`start(..., key=)`), across every worker.
        `fair`: claims go round-robin between keys, so one key's backlog delays no other.
        `rate`, `rate_per_key` ("100/minute", "10/s", "5/30s"): at most so many of its runs
        (of one key) begin in any such window."""
        if name == DEFAULT_QUEUE:
            raise ConfigError(
                "the default queue cannot be declared or limited: declare a queue of your "
                "own and put the runs to limit on it (@app.workflow(queue=...))"
            )
        declared = Queue(
            check_name(name, "a queue's name"),
            concurrency=check_slots(concurrency, "concurrency"),
            concurrency_per_key=check_slots(concurrency_per_key, "concurrency_per_key"),
            fair=bool(fair),
            rate=parse_rate(rate, "rate"),
            rate_per_key=parse_rate(rate_per_key, "rate_per_key"),
        )
        return self.registry.add_queue(declared)

    def dependency(self, name: str, policy: Dependency) -> None:
        """Protect calls to the service `name` (steps with dependency=name): a circuit
        breaker shared by all workers, and optional rate and concurrency limits."""
        self.registry.dependencies[name] = policy

    def dependency_policy(self, name: str) -> Dependency:
        """The policy for `name`; a dependency nobody configured gets a default breaker."""
        return self.registry.dependency_policy(name)

    def step_named(self, name: str) -> Step | None:
        return self.registry.step_named(name)

    def workflow_names(self) -> list[str]:
        return self.registry.workflow_names()

    def workflow_named(self, name: str) -> Workflow:
        return self.registry.workflow_named(name)

    def queue_of(self, name: str | None, workflow: Workflow) -> str | None:
        return self.registry.queue_of(name, workflow)

    def settings(self) -> Settings:
        """The settings a worker starting now runs with."""
        return Settings(
            clock=self.clock,
            default_retry=self.default_retry,
            max_recoveries=self.max_recoveries,
            seed=self.seed,
            hooks=chain(self.hooks),
            retention=self.retention,
            max_payload=self.max_payload,
        )

    # -- client calls -------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        moved = _ON_THE_CLIENT.get(name)
        if moved is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(
            f"App.{name} is gone: what a caller does to runs goes through the app's client, "
            f"app.client.{moved} (see docs/reference/api.md#durablyclient)"
        )

    def upgrade(
        self,
        *,
        workflow: str | None = None,
        dry_run: bool = False,
        by: str = "app",
        via: Via | None = None,
    ) -> list[Upgrade]:
        """Move the runs in flight on a version no live worker serves to this code's version,
        each only if this code replays its history (no step runs); the others stay, with
        where they part (durably.runtime.upgrades). `dry_run`: only say what would move.
        `via`: how a person asked (the CLI, the API, the dashboard): each move is then in the
        audit trail, by `by`."""
        upgrades = upgrade(
            self.store,
            self.registry,
            now=self.clock.now(),
            by=by,
            workflow=workflow,
            dry_run=dry_run,
            via=via,
        )
        self.client.notify()
        return upgrades

    def worker(self, **options: Any) -> Worker:
        """A worker for this app (see Worker for the options)."""
        return Worker(self, **options)

    def run_until_idle(self, **options: Any) -> int:
        """Execute due runs in this process until none is left; return how many ended."""
        return Worker(self, **options).run_until_idle()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` whenever this app starts a run or acts on one; returns the
        unsubscribe call."""
        return self.client.subscribe(listener)

    def offer(self, taker: Taker) -> Callable[[], None]:
        """Let a worker in this process take the runs this app starts that it would claim
        at once, claimed in their start's commit (Client.offer); returns the withdrawal."""
        return self.client.offer(taker)

    @property
    def store_url(self) -> str | None:
        """The URL the app opens its store from (None if it was given a Store): the CLI opens
        it as it is, to read without creating it."""
        return self._url

    def use_store(self, store: str | Store) -> None:
        """Point the app at another store (a URL, opened on first use, or a Store), before
        its workers start: what `durably worker --store` does."""
        self.close()
        self._store = None if isinstance(store, str) else store
        self._url = store if isinstance(store, str) else None

    # -- the store ----------------------------------------------------------------------

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._open_lock:
                if self._store is None:
                    assert self._url is not None
                    # $DURABLY_MIGRATE=never: check the schema, never change it
                    self._store = open_store(self._url, create=may_migrate())
        return self._store

    def close(self) -> None:
        self.client.close()  # its listener for ended runs, if a handle waited
        if self._store is not None:
            self._store.close()
            self._store = None if self._url is not None else self._store


# What App once did itself and its client does now: the name on the client, with its call.
_ON_THE_CLIENT = {
    "get_run": "get(run_id)",
    "runs": "runs(...).runs",
    "history": "history(run_id)",
    "dead_letters": "dead_letters()",
    "retry": "retry(run_id)",
    "skip_step": "skip_step(run_id, result=...)",
    "fail": "fail(run_id)",
    "cancel": "cancel(run_id)",
    "pause": "pause(run_id)",
    "resume": "resume(run_id)",
    "restart": "restart(run_id, from_step=...) (app.handle(its id) to wait for it)",
    "approvals": "approvals()",
    "approve": "decide(run_id, name, approved=True)",
    "reject": "decide(run_id, name, approved=False)",
    "decide_with_token": "decide_with_token(token, approved=...)",
    "send": "send(run_id, kind, ...)",
    "signal": "signal(run_id, name, payload)",
    "signal_async": "signal_async(run_id, name, payload)",
}


def _check_recoveries(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(
            f"max_recoveries must be a whole number of 0 or more, not {limit!r}: it is how many "
            "workers may die under one run before it is parked as a poison pill"
        )


def _seconds(value: Duration, what: str) -> float:
    """A schedule's duration in seconds; ConfigError, saying what is wrong, if it is none."""
    try:
        return parse_duration(value, what=what).total_seconds()
    except ValueError as exc:
        raise ConfigError(f"@app.schedule({what}=...): {exc}") from None


def _retention(value: Duration) -> timedelta:
    try:
        retention = parse_duration(value, what="retention")
    except ValueError as exc:
        raise ConfigError(f"App(retention=...): {exc}") from None
    if retention < timedelta(minutes=1):
        raise ConfigError(
            f"App(retention={value!r}) is too short: a run is deleted that long after it ends, "
            "and whoever waits for its result must find it first. Give a minute or more"
        )
    return retention


def _names(redact: Collection[str]) -> list[str]:
    if isinstance(redact, str) or not all(isinstance(name, str) and name for name in redact):
        raise ConfigError(f"redact is a list of field names, like ['iban', 'pin'], not {redact!r}")
    return list(redact)
