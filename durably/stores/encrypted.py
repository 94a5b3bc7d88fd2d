"""A store whose payloads are encrypted at rest: it seals what its inner store writes and opens
what it reads, so that the engine, the client and the views above it see plain values, and
the database holds none.

Sealed (durably.codec.encryption): a run's input and result; the data of the events that
carry a value (a step's result, a skipped step's given result, a recorded value, a
heartbeat's details), a step's input in `step_started`, a message's and a signal's data, an
approval's details; an inbox message's data. Left in the clear: what durably queries or
shows in lists (ids, names, statuses, times, error classes and messages, who acted, a
decision's comment), so that claims, filters and the dashboard's lists work unchanged; and a
run's attributes (durably.core.attributes), which are for searching by: that is why a name
that looks like a secret's is refused for them.

A value sealed with a key this process does not hold is read as it is stored: the codec
refuses to decode it (PayloadError naming the key), and the views show `encrypted (key k2)`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from durably.codec.encryption import PREFIX, Keyring, sealed_key
from durably.core.audit import Audit, AuditEntry
from durably.core.history import Event, EventKind
from durably.core.outputs import PublishedEvent, StreamItem, StreamWrite
from durably.core.queues import Queue
from durably.core.status import RunStatus
from durably.core.webhooks import NewWebhook, Outgoing, Webhook
from durably.stores.protocol import Store
from durably.stores.records import (
    Checkpoint,
    Claim,
    Delivery,
    Lease,
    Message,
    NewRun,
    RunRecord,
    Sent,
    Serves,
)
from durably.stores.sql.rekeying import TextChange
from durably.stores.sql.store import SqlStore

__all__ = ["SEALED_FIELDS", "SEALED_WHOLE", "EncryptedStore"]

# Kinds whose whole data is a value of the workflow's
SEALED_WHOLE = frozenset(
    {
        EventKind.STEP_COMPLETED,
        EventKind.STEP_SKIPPED,
        EventKind.VALUE_RECORDED,
        EventKind.STEP_HEARTBEAT,
        EventKind.EVENT_SET,
    }
)
# Kinds whose data is a JSON object with one field that holds a value
SEALED_FIELDS: dict[EventKind, str] = {
    EventKind.STEP_STARTED: "input",
    EventKind.MESSAGE_RECEIVED: "data",
    EventKind.SIGNAL_RECEIVED: "data",
    EventKind.APPROVAL_REQUESTED: "details",
}


def change_event_data(kind: str, data: str | None, change: TextChange) -> str | None:
    """`data` of an event of `kind` with its value changed by `change` (sealed or opened);
    as it is for kinds that carry no value."""
    if data is None:
        return None
    if kind in SEALED_WHOLE:
        return change(data)
    field = SEALED_FIELDS.get(kind)  # type: ignore[call-overload]
    if field is None:
        return data
    if kind == EventKind.STEP_STARTED:
        changed = _change_step_input(data, change)
        if changed is not None:
            return changed
    fields = json.loads(data)
    value = fields.get(field)
    if value is None:
        return data
    if kind == EventKind.STEP_STARTED:  # the input is a JSON object, not JSON text
        text = value if sealed_key(value) is not None else json.dumps(value)
        changed = change(text)
        fields[field] = changed if sealed_key(changed) is not None else json.loads(changed)
    else:
        fields[field] = change(value)
    return json.dumps(fields)


# How the engine writes a step's start (durably.core.event_data.step_started_data): the key
# as JSON, then the input. The key's JSON escapes every quote in it, so the first `, "input": `
# is where the input begins; a sealed input is a JSON string of base64url text and colons.
_KEY_HEAD, _INPUT_HEAD, _UNDO_TAIL = '{"key": ', ', "input": ', ', "undo": true}'


def _change_step_input(data: str, change: TextChange) -> str | None:
    """`step_started` data with its input changed, cut out of the text as the engine wrote it
    (a step starts on every attempt: parsing and writing the JSON again cost more than the
    sealing); None for data in another form (the caller parses it)."""
    cut = data.find(_INPUT_HEAD)
    if not data.startswith(_KEY_HEAD) or cut < 0:
        return None
    tail = _UNDO_TAIL if data.endswith(_UNDO_TAIL) else "}"
    head, given = data[: cut + len(_INPUT_HEAD)], data[cut + len(_INPUT_HEAD) : -len(tail)]
    sealed = given.startswith('"' + PREFIX)
    changed = change(given[1:-1] if sealed else given)
    if sealed_key(changed) is not None:
        return f'{head}"{changed}"{tail}'
    return head + changed + tail


class EncryptedStore:
    """`inner`, with every payload sealed by `keys` on its way in and opened on its way out."""

    def __init__(self, inner: Store, keys: Keyring) -> None:
        self.inner = inner
        self.keys = keys
        self.url = inner.url
        self.writers = inner.writers
        self._held = frozenset(keys.ids)

    def __getattr__(self, name: str) -> Any:  # what is no store method: path, dialect, ...
        return getattr(self.inner, name)

    # -- sealing on the way in --------------------------------------------------------

    def _seal(self, text: str) -> str:
        """`text` sealed; a value sealed already (an exported run imported) as it is."""
        return text if sealed_key(text) is not None else self.keys.seal(text)

    def _seal_run(self, run: NewRun) -> NewRun:
        return dataclasses.replace(run, input=self._seal(run.input))

    def _seal_event(self, event: Event) -> Event:
        data = change_event_data(event.kind, event.data, self._seal)
        return event if data is event.data else _with_data(event, data)

    def _seal_message(self, message: Message) -> Message:
        if message.data is None:
            return message
        return dataclasses.replace(message, data=self._seal(message.data))

    def _seal_checkpoint(self, checkpoint: Checkpoint) -> Checkpoint:
        seal = self._seal
        return dataclasses.replace(
            checkpoint,
            events=tuple(self._seal_event(event) for event in checkpoint.events),
            result=None if checkpoint.result is None else seal(checkpoint.result),
            starts=tuple(self._seal_run(run) for run in checkpoint.starts),
            messages=tuple(self._seal_message(message) for message in checkpoint.messages),
            input=None if checkpoint.input is None else seal(checkpoint.input),
        )

    # -- opening on the way out ---------------------------------------------------------

    def _open(self, text: str) -> str:
        """`text` opened if this keyring holds its key; as stored if not (views show
        `encrypted (key k2)`, and decoding it is refused, naming the key)."""
        key = sealed_key(text)
        if key is None or key not in self._held:
            return text
        return self.keys.open(text)

    def _open_run(self, run: RunRecord) -> RunRecord:
        result = None if run.result is None else self._open(run.result)
        return dataclasses.replace(run, input=self._open(run.input), result=result)

    def _open_event(self, event: Event) -> Event:
        if event.data is None or PREFIX not in event.data:  # the common case: one scan
            return event
        data = change_event_data(event.kind, event.data, self._open)
        return event if data is event.data else _with_data(event, data)

    def _open_events(self, events: Sequence[Event]) -> list[Event]:
        return [self._open_event(event) for event in events]

    def _open_delivery(self, delivery: Delivery) -> Delivery:
        if delivery.data is None:
            return delivery
        return dataclasses.replace(delivery, data=self._open(delivery.data))

    def _open_claim(self, claim: Claim) -> Claim:
        return dataclasses.replace(
            claim,
            input=self._open(claim.input),
            events=tuple(self._open_events(claim.events)),
            inbox=tuple(self._open_delivery(delivery) for delivery in claim.inbox),
        )

    # -- the engine's side --------------------------------------------------------------

    def create_run(self, run: NewRun, *, now: datetime) -> tuple[RunRecord, bool]:
        record, created = self.inner.create_run(self._seal_run(run), now=now)
        return self._open_run(record), created

    def create_runs(self, runs: Sequence[NewRun], *, now: datetime) -> list[tuple[RunRecord, bool]]:
        made = self.inner.create_runs([self._seal_run(run) for run in runs], now=now)
        return [(self._open_run(record), created) for record, created in made]

    def create_claimed(
        self, run: NewRun, owner: str, *, now: datetime, lease: timedelta
    ) -> tuple[RunRecord, Claim] | None:
        made = self.inner.create_claimed(self._seal_run(run), owner, now=now, lease=lease)
        if made is None:
            return None
        record, claim = made
        return self._open_run(record), self._open_claim(claim)

    def claim(
        self,
        owner: str,
        workflows: Serves,
        *,
        now: datetime,
        lease: timedelta,
        limit: int,
        queues: Sequence[Queue] | None = None,
    ) -> list[Claim]:
        claims = self.inner.claim(
            owner, workflows, now=now, lease=lease, limit=limit, queues=queues
        )
        return [self._open_claim(claim) for claim in claims]

    def renew(self, leases: Sequence[Lease], *, now: datetime, lease: timedelta) -> set[str]:
        return self.inner.renew(leases, now=now, lease=lease)

    def mail(self, run_ids: Collection[str]) -> dict[str, tuple[Delivery, ...]]:
        mail = self.inner.mail(run_ids)
        return {run: tuple(self._open_delivery(d) for d in found) for run, found in mail.items()}

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        return self.inner.commit([self._seal_checkpoint(c) for c in checkpoints], now=now)

    def transact(
        self,
        lease: Lease,
        work: Callable[[Any], Checkpoint],
        *,
        now: datetime,
        committing: Callable[[], None] | None = None,
    ) -> bool:
        def sealed_work(db: Any) -> Checkpoint:
            return self._seal_checkpoint(work(db))

        return self.inner.transact(lease, sealed_work, now=now, committing=committing)

    def send(self, message: Message, *, now: datetime) -> Sent:
        return self.inner.send(self._seal_message(message), now=now)

    def wake(self, run_ids: Collection[str], *, now: datetime) -> None:
        self.inner.wake(run_ids, now=now)

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.watch(*args, **kwargs)

    def update_gate(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.update_gate(*args, **kwargs)

    def update_schedule(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.update_schedule(*args, **kwargs)

    def schedules(self) -> dict[str, str]:
        return self.inner.schedules()

    def beat(self, *args: Any, **kwargs: Any) -> None:
        self.inner.beat(*args, **kwargs)

    def prune(self, before: datetime, *, limit: int) -> int:
        return self.inner.prune(before, limit=limit)

    # -- the operator's side ------------------------------------------------------------

    def fork(
        self,
        run: NewRun,
        events: Sequence[Event],
        *,
        source: str,
        note: Event,
        now: datetime,
        audit: Audit | None = None,
    ) -> bool:
        sealed = [self._seal_event(event) for event in events]
        note = self._seal_event(note)
        return self.inner.fork(
            self._seal_run(run), sealed, source=source, note=note, now=now, audit=audit
        )

    def import_run(self, run: NewRun, events: Sequence[Event], *, now: datetime) -> bool:
        sealed = [self._seal_event(event) for event in events]
        return self.inner.import_run(self._seal_run(run), sealed, now=now)

    def move_version(self, run_id: str, *, note: Event, **kwargs: Any) -> bool:
        return self.inner.move_version(run_id, note=self._seal_event(note), **kwargs)

    def take(
        self,
        run_id: str,
        owner: str,
        statuses: Collection[RunStatus],
        *,
        now: datetime,
        lease: timedelta,
    ) -> Claim | None:
        claim = self.inner.take(run_id, owner, statuses, now=now, lease=lease)
        return None if claim is None else self._open_claim(claim)

    def get_run(self, run_id: str) -> RunRecord | None:
        run = self.inner.get_run(run_id)
        return None if run is None else self._open_run(run)

    def history(self, run_id: str) -> list[Event]:
        return self._open_events(self.inner.history(run_id))

    def histories(self, run_ids: Sequence[str]) -> dict[str, list[Event]]:
        found = self.inner.histories(run_ids)
        return {run_id: self._open_events(events) for run_id, events in found.items()}

    def runs(self, **filters: Any) -> list[RunRecord]:
        return [self._open_run(run) for run in self.inner.runs(**filters)]

    def attributes(self, run_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        return self.inner.attributes(run_ids)  # stored in the clear, to be searched

    def parked(
        self, *, decisions: bool, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[RunRecord]:
        found = self.inner.parked(decisions=decisions, limit=limit, after=after)
        return [self._open_run(run) for run in found]

    def expire_leases(self, owner: str, *, now: datetime) -> int:
        return self.inner.expire_leases(owner, now=now)

    def watch_finished(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.watch_finished(*args, **kwargs)

    # -- what runs publish: event values and stream items are the workflow's values ------

    def append_stream(
        self, run_id: str, epoch: int, writes: Sequence[StreamWrite], *, now: datetime
    ) -> bool:
        sealed = [
            write
            if write.value is None
            else dataclasses.replace(write, value=self._seal(write.value))
            for write in writes
        ]
        return self.inner.append_stream(run_id, epoch, sealed, now=now)

    def published_events(
        self, run_id: str, keys: Sequence[str] | None = None
    ) -> list[PublishedEvent]:
        found = self.inner.published_events(run_id, keys)
        return [dataclasses.replace(event, value=self._open(event.value)) for event in found]

    def read_stream(
        self, run_id: str, key: str, *, offset: int = 0, limit: int = 1_000
    ) -> list[StreamItem]:
        items = self.inner.read_stream(run_id, key, offset=offset, limit=limit)
        return [
            item if item.value is None else dataclasses.replace(item, value=self._open(item.value))
            for item in items
        ]

    def watch_outputs(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.watch_outputs(*args, **kwargs)

    def gates(self) -> dict[str, str]:
        return self.inner.gates()

    def unclaimable(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.unclaimable(*args, **kwargs)

    def unserved(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.unserved(*args, **kwargs)

    def prunable(self, before: datetime) -> int:
        return self.inner.prunable(before)

    def stats(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.stats(*args, **kwargs)

    def activity(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.activity(*args, **kwargs)

    def forget_worker(self, name: str) -> None:
        self.inner.forget_worker(name)

    def record_audit(self, entry: Audit, *, now: datetime, run_id: str | None = None) -> None:
        self.inner.record_audit(entry, now=now, run_id=run_id)  # an entry holds no payload

    def audit_trail(self, **filters: Any) -> list[AuditEntry]:
        return self.inner.audit_trail(**filters)

    def workers(self) -> Any:
        return self.inner.workers()

    # bulk jobs hold no payload: a filter, who acted, why a run was skipped

    def create_bulk_job(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.create_bulk_job(*args, **kwargs)

    def matching(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.matching(*args, **kwargs)

    def bulk_job(self, job_id: str) -> Any:
        return self.inner.bulk_job(job_id)

    def bulk_jobs(self, **kwargs: Any) -> Any:
        return self.inner.bulk_jobs(**kwargs)

    def bulk_runs(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.bulk_runs(*args, **kwargs)

    def settle_bulk_runs(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.settle_bulk_runs(*args, **kwargs)

    # webhooks: a webhook's secret is sealed; its deliveries carry no payload (no input or
    # result, by design), and neither does the change stream

    def add_webhook(self, webhook: NewWebhook, *, now: datetime) -> Webhook:
        secret = None if webhook.secret is None else self._seal(webhook.secret)
        return self.inner.add_webhook(dataclasses.replace(webhook, secret=secret), now=now)

    def take_deliveries(self, *, now: datetime, lease: timedelta, limit: int) -> list[Outgoing]:
        taken = self.inner.take_deliveries(now=now, lease=lease, limit=limit)
        return [
            item
            if item.secret is None
            else dataclasses.replace(item, secret=self._open(item.secret))
            for item in taken
        ]

    def webhooks(self) -> Any:
        return self.inner.webhooks()

    def remove_webhook(self, webhook_id: str) -> bool:
        return self.inner.remove_webhook(webhook_id)

    def settle_deliveries(self, *args: Any, **kwargs: Any) -> list[bool]:
        return self.inner.settle_deliveries(*args, **kwargs)

    def deliveries(self, **kwargs: Any) -> Any:
        return self.inner.deliveries(**kwargs)

    def retry_delivery(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.retry_delivery(*args, **kwargs)

    def due_deliveries(self, *, now: datetime) -> int:
        return self.inner.due_deliveries(now=now)

    def watch_status_changes(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.watch_status_changes(*args, **kwargs)

    def set_status_changes(self, on: bool | None = None) -> bool:
        return self.inner.set_status_changes(on)

    def close(self) -> None:
        self.inner.close()

    # -- rotation ---------------------------------------------------------------------

    def rotate(self, *, batch: int = 500) -> Iterator[int]:
        """Seal every stored payload with the current key (those sealed with an older key,
        and those stored before encryption was turned on), `batch` rows a transaction;
        yields how many rows each batch changed. Every key that sealed a value must be held."""
        keys = self.keys

        def reseal(text: str) -> str:
            return text if keys.is_current(text) else keys.seal(keys.open(text))

        if not isinstance(self.inner, SqlStore):
            raise TypeError(f"{type(self.inner).__name__} cannot rewrite its payloads")
        kinds = [str(kind) for kind in (*SEALED_WHOLE, *SEALED_FIELDS)]
        yield from self.inner.rewrite_payloads(reseal, change_event_data, kinds, batch=batch)

    def payload_rows(self) -> int:
        """How many rows `rotate` reads: the length of its progress bar."""
        if not isinstance(self.inner, SqlStore):
            raise TypeError(f"{type(self.inner).__name__} cannot count its payloads")
        return self.inner.payload_rows([str(kind) for kind in (*SEALED_WHOLE, *SEALED_FIELDS)])


def _with_data(event: Event, data: str | None) -> Event:
    """`event` with another `data` (dataclasses.replace, which costs more, would do the same)."""
    return Event(event.seq, event.kind, event.at, event.position, event.name, event.attempt, data)
