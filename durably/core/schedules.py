"""Schedules, as plain data and arithmetic: when a schedule's ticks fall, which of them to start
now, and its state from one pass of the scheduler to the next.

Exactly one run per tick, whatever the number of workers: a tick's run has a fixed id (the
schedule's name and the tick's time), so a second start of it finds the run there. Ticks are
planned under the schedule's lock and remembered as `pending` before their runs are created,
so a worker that dies between the two leaves them for the next pass: never lost.

The policies, in one place:
- missed ticks (the workers were down): `catchup="latest"` (default) starts only the latest
  missed tick; `catchup="all"` starts every one, in order (at most MAX_CATCHUP a pass).
- a tick while the schedule's previous run has not ended: `overlap="skip"` (default) skips
  it; `"queue"` holds it until that run ends, then starts it; `"allow"` starts it anyway.
- `jitter`: each tick starts a fixed delay after its time, the same for every worker, drawn
  from [0, jitter) by the tick's name: ticks of many schedules do not all fire at once.
Cron expressions are read by cronsim, which follows cron's rules across daylight saving
changes (a time skipped by the clock runs at the next valid one; a repeated one runs once).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from durably.errors import ConfigError

__all__ = [
    "CATCHUP",
    "MAX_CATCHUP",
    "OVERLAP",
    "Plan",
    "Spec",
    "State",
    "plan",
    "run_id",
    "ticks",
]

OVERLAP = ("skip", "queue", "allow")
CATCHUP = ("latest", "all")
MAX_CATCHUP = 100  # ticks one pass starts at most (catchup="all" after a long outage)
_MAX_SCAN = 1_000_000  # missed ticks one pass looks through at most (a minutely cron: 2 years)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Spec:
    """When a schedule ticks and what it does then: `cron` (in `timezone`) or `every`."""

    workflow: str
    cron: str | None = None
    every: float | None = None  # seconds; ticks at whole multiples of it since the epoch
    timezone: str = "UTC"
    jitter: float = 0.0  # seconds
    overlap: str = "skip"
    catchup: str = "latest"

    def __post_init__(self) -> None:
        check(self)


@dataclass(frozen=True, slots=True)
class State:
    """What the store keeps of a schedule between passes (JSON in durably_schedules)."""

    spec: Spec
    paused: bool = False
    last_tick: datetime | None = None  # the latest tick planned (started, held or skipped)
    last_run: str | None = None  # the run of the latest tick started
    pending: tuple[str, ...] = ()  # ticks planned, runs not known to be created yet (ISO)
    held: str | None = None  # a tick held for the previous run's end (overlap="queue")
    fired: int = 0
    skipped: int = 0
    since: datetime = field(default=_EPOCH)  # ticks after it are due (its creation, a resume)

    def to_json(self) -> str:
        data = {
            "spec": asdict(self.spec),
            "paused": self.paused,
            "last_tick": None if self.last_tick is None else self.last_tick.isoformat(),
            "last_run": self.last_run,
            "pending": list(self.pending),
            "held": self.held,
            "fired": self.fired,
            "skipped": self.skipped,
            "since": self.since.isoformat(),
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> State:
        data = json.loads(text)
        last = data.get("last_tick")
        return cls(
            Spec(**data["spec"]),
            paused=bool(data.get("paused")),
            last_tick=None if last is None else datetime.fromisoformat(last),
            last_run=data.get("last_run"),
            pending=tuple(data.get("pending", ())),
            held=data.get("held"),
            fired=int(data.get("fired", 0)),
            skipped=int(data.get("skipped", 0)),
            since=datetime.fromisoformat(data.get("since", _EPOCH.isoformat())),
        )

    def next_fire(self, name: str) -> datetime | None:
        """When the next tick after the last planned one starts (its time plus jitter)."""
        if self.paused:
            return None
        upcoming = next(ticks(self.spec, _after(self)), None)
        return None if upcoming is None else upcoming + jitter(self.spec, name, upcoming)


@dataclass(frozen=True, slots=True)
class Plan:
    """One pass's decision: the schedule's new state, and the ticks whose runs to create."""

    state: State
    start: tuple[datetime, ...]


def check(spec: Spec) -> None:
    """ConfigError naming what is wrong with a schedule, and what to do."""
    if (spec.cron is None) == (spec.every is None):
        raise ConfigError("a schedule takes one of cron='...' or every='...', not both or none")
    if spec.cron is not None:
        if not spec.cron.startswith("@") and len(spec.cron.split()) != 5:
            raise ConfigError(
                f"cron={spec.cron!r} has {len(spec.cron.split())} fields: a schedule's cron has "
                "five (minute, hour, day of month, month, day of week), e.g. '0 6 * * *'"
            )
        try:
            CronSim(spec.cron, datetime(2026, 1, 1))
        except CronSimError as exc:
            raise ConfigError(f"cron={spec.cron!r} is not a cron expression: {exc}") from None
    if spec.every is not None and spec.every < 1:
        raise ConfigError(f"every= must be at least 1s, not {spec.every}s")
    try:
        ZoneInfo(spec.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"timezone={spec.timezone!r} is not a time zone: use an IANA name such as "
            "'Europe/Berlin' or 'UTC'"
        ) from None
    if spec.overlap not in OVERLAP:
        raise ConfigError(f"overlap={spec.overlap!r}: use one of {', '.join(OVERLAP)}")
    if spec.catchup not in CATCHUP:
        raise ConfigError(f"catchup={spec.catchup!r}: use one of {', '.join(CATCHUP)}")
    if spec.jitter < 0:
        raise ConfigError(f"jitter= must not be negative, not {spec.jitter}s")


def ticks(spec: Spec, after: datetime) -> Iterator[datetime]:
    """The schedule's tick times after `after`, in order, as UTC datetimes."""
    if spec.every is not None:
        step = timedelta(seconds=spec.every)
        count = (after - _EPOCH) // step + 1
        while True:
            yield _EPOCH + count * step
            count += 1
    assert spec.cron is not None
    zone = ZoneInfo(spec.timezone)
    local = after.astimezone(zone).replace(tzinfo=None)
    for moment in CronSim(spec.cron, local.replace(tzinfo=zone)):
        yield moment.astimezone(UTC)


def jitter(spec: Spec, name: str, tick: datetime) -> timedelta:
    """The tick's fixed delay, the same for every worker: [0, jitter) by its name."""
    if not spec.jitter:
        return timedelta(0)
    digest = hashlib.sha256(run_id(name, tick).encode()).digest()
    return timedelta(seconds=spec.jitter * int.from_bytes(digest[:8], "big") / 2**64)


def run_id(name: str, tick: datetime) -> str:
    """The id of the run of a schedule's tick: the same for every worker, so it starts once."""
    return f"schedule:{name}:{tick.astimezone(UTC).isoformat()}"


def plan(name: str, state: State, now: datetime, *, previous_ended: bool) -> Plan:
    """What a pass does at `now`: which due ticks to start, skip or hold, and the state after.
    `previous_ended`: whether the schedule's latest run has ended (or there is none)."""
    if state.paused:
        return Plan(state, ())
    if state.held is not None:  # overlap="queue": it waits for the previous run's end
        if not previous_ended:
            return Plan(state, ())
        tick = datetime.fromisoformat(state.held)
        return Plan(_started(state, name, [tick], held=None), (tick,))
    due, missed = _due(state, name, now)  # catchup="latest": the earlier ones are skipped
    if not due:
        return Plan(state, ())
    state = replace(state, skipped=state.skipped + missed)
    if state.spec.overlap == "allow":
        return Plan(_started(state, name, due, held=None), tuple(due))
    if previous_ended:  # one at a time: the later ticks are due again at the next pass
        return Plan(_started(state, name, due[:1], held=None), tuple(due[:1]))
    if state.spec.overlap == "queue":  # the first waits; the later ones come after it
        return Plan(replace(state, last_tick=due[0], held=due[0].isoformat()), ())
    return Plan(replace(state, last_tick=due[-1], skipped=state.skipped + len(due)), ())


def _due(state: State, name: str, now: datetime) -> tuple[list[datetime], int]:
    """The ticks after the last planned one whose start time (with jitter) has come, and how
    many more came that are not listed: catchup="all" lists MAX_CATCHUP at most (the rest
    start in the next passes); "latest" lists only the latest, however many came."""
    due: list[datetime] = []
    more = 0
    latest = state.spec.catchup == "latest"
    for count, tick in enumerate(ticks(state.spec, _after(state))):
        if tick + jitter(state.spec, name, tick) > now or count >= _MAX_SCAN:
            break
        if latest:
            more += bool(due)
            due = [tick]
        elif len(due) < MAX_CATCHUP:
            due.append(tick)
    return due, more


def _started(state: State, name: str, started: list[datetime], *, held: str | None) -> State:
    last = started[-1]
    return replace(
        state,
        last_tick=max(last, state.last_tick) if state.last_tick else last,
        last_run=run_id(name, last),
        pending=(*state.pending, *(tick.isoformat() for tick in started)),
        held=held,
        fired=state.fired + len(started),
    )


def _after(state: State) -> datetime:
    """Ticks after this are due: the last one planned, or when the schedule began or resumed."""
    return state.since if state.last_tick is None else max(state.last_tick, state.since)
