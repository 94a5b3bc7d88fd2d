"""The durable calls a workflow makes besides steps: timers, signal waits, and values that
replay unchanged. Each takes the next position, as a step call does, so that replay meets it
where it was and a changed workflow is caught (NonDeterminismError).

A wait that cannot end now raises Suspend: the run is handed back to the store, due when the
wait ends (a timer's time, a signal's timeout, or never: a signal then wakes it), and holds no
worker, lease or coroutine until then. Any worker resumes it by replay; a replayed wait finds
its recorded start and ends at the recorded time, whatever the code would compute now.

Every method runs on the run's event loop (a sync workflow hops there), and appends events
that the next checkpoint commits: a fired timer or a taken signal is durable before any step
that follows it starts, and a worker that dies before that simply fires or takes it again, the
same one, on replay (signals are matched to inbox messages in order, each taken once).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from durably.clock import Clock
from durably.core.event_data import encode_payload
from durably.core.event_data import read_payload as read
from durably.core.history import EventKind
from durably.core.payloads import MessageReceived, SignalReceived, WaitStarted
from durably.core.replay import StepRecord, signal_timeout_message
from durably.core.signals import SIGNAL_KIND
from durably.errors import SignalTimeout
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.flow import Suspend

__all__ = ["Waits"]

_TIMER = "durably.sleep"

# Takes the next position for a durable call named so: the position and what the history
# holds there (None: a new call). Raises NonDeterminismError if another call was recorded.
Place = Callable[[str], tuple[int, StepRecord | None]]


class Waits:
    def __init__(self, writer: HistoryWriter, clock: Clock, place: Place) -> None:
        self._writer = writer
        self._clock = clock
        self._place = place
        self._taken: set[int] | None = None  # inbox messages signal waits took (lazily)

    def sleep_until(self, until: datetime) -> None:
        """Return once `until` has come; before that, hand the run back due then."""
        position, record = self._place(_TIMER)
        if record is not None and record.completed:
            return
        if record is None:
            data = encode_payload(WaitStarted(until))
            self._writer.append(EventKind.TIMER_SET, position, _TIMER, None, data)
        elif record.not_before is not None:
            until = record.not_before  # the recorded time stands
        if until <= self._clock.now():
            self._writer.append(EventKind.TIMER_FIRED, position, _TIMER)
            return
        raise Suspend(until)

    def wait_for_signal(self, name: str, timeout: timedelta | None) -> str:
        """The JSON payload of the next signal `name` sent to this run (the oldest not yet
        taken), waiting for it if none came yet; SignalTimeout once `timeout` passes first."""
        call = f"durably.signal:{name}"
        position, record = self._place(call)
        if record is not None and record.completed:
            assert record.result is not None
            return record.result
        if record is not None and record.error is not None:
            raise SignalTimeout(name, record.error.message)
        if record is None:
            until = None if timeout is None else self._clock.now() + timeout
            data = encode_payload(WaitStarted(until))
            self._writer.append(EventKind.SIGNAL_WAITING, position, call, None, data)
            record = StepRecord(position, call, "signal", not_before=until, waiting=True)
        until = record.not_before
        message = self._next_signal(name)
        if message is not None:
            received = SignalReceived(message.id, message.data, message.sender, message.sent_at)
            self._writer.append(
                EventKind.SIGNAL_RECEIVED, position, call, None, encode_payload(received)
            )
            return message.data or "null"
        if until is not None and until <= self._clock.now():
            self._writer.append(EventKind.SIGNAL_TIMED_OUT, position, call)
            raise SignalTimeout(name, signal_timeout_message(record))
        raise Suspend(until)

    def value(self, kind: str, make: Callable[[], str]) -> str:
        """The JSON of a value made once (`make`) and recorded: the same on every replay."""
        name = f"durably.{kind}"
        position, record = self._place(name)
        if record is not None and record.completed:
            assert record.result is not None
            return record.result
        text = make()
        self._writer.append(EventKind.VALUE_RECORDED, position, name, None, text)
        return text

    def _next_signal(self, name: str) -> MessageReceived | None:
        """The oldest signal `name` in the history that no wait took yet."""
        taken = self._taken_messages()
        for event in self._writer.events:
            if event.kind is not EventKind.MESSAGE_RECEIVED:
                continue
            message = read(event, MessageReceived)
            if message.kind == SIGNAL_KIND and message.name == name and message.id not in taken:
                taken.add(message.id)
                return message
        return None

    def _taken_messages(self) -> set[int]:
        if self._taken is None:
            self._taken = {
                read(event, SignalReceived).message
                for event in self._writer.events
                if event.kind is EventKind.SIGNAL_RECEIVED
            }
        return self._taken
