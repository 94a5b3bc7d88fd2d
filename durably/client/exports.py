"""A run as a file: `durably runs export RUN > run.json` writes its record and its whole
history as plain JSON; `read_export` reads one back, refusing what durably did not write, so
that a replay test (durably.testing.replay) runs on exactly what was recorded."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from durably.core.history import Event, EventKind
from durably.core.secrets import redact_text
from durably.errors import PayloadError
from durably.stores.records import RunRecord

__all__ = ["FORMAT", "Exported", "export_run", "read_export", "redacted"]

FORMAT = "durably.run/1"


@dataclass(frozen=True, slots=True)
class Exported:
    """What a replay needs of an exported run."""

    run_id: str
    workflow: str
    version: str | None
    input: str  # JSON
    status: str
    events: tuple[Event, ...]


def export_run(run: RunRecord, events: Sequence[Event]) -> dict[str, Any]:
    """The run and its history, as JSON-ready data (times as ISO 8601, data as stored)."""
    return {
        "format": FORMAT,
        "run": {
            "id": run.id,
            "workflow": run.workflow,
            "version": run.version,
            "status": str(run.status),
            "input": run.input,
            "result": run.result,
            "error": None if run.error is None else [run.error.error_class, run.error.message],
            "created_at": run.created_at.isoformat(),
            "priority": run.priority,
            "parent": run.parent,
        },
        "events": [
            {
                "seq": e.seq,
                "kind": str(e.kind),
                "at": e.at.isoformat(),
                "position": e.position,
                "name": e.name,
                "attempt": e.attempt,
                "data": e.data,
            }
            for e in events
        ],
    }


def redacted(exported: Mapping[str, Any]) -> dict[str, Any]:
    """An export as the HTTP API shows it: the secrets in the run's input and result and in
    its events' data redacted (durably.core.secrets). `durably runs export`, which reads the
    store itself, writes the run's data as it is, for replay tests."""
    run = dict(exported["run"])
    for field in ("input", "result"):
        if run[field] is not None:
            run[field] = redact_text(run[field])
    events = [
        {**event, "data": None if event["data"] is None else redact_text(event["data"])}
        for event in exported["events"]
    ]
    return {**exported, "run": run, "events": events}


def read_export(source: str | Path | Mapping[str, Any]) -> Exported:
    """An exported run from a file's path, its JSON text, or its data; PayloadError if it is
    not what `durably runs export` writes."""
    try:
        data = _load(source)
        if data.get("format") != FORMAT:
            raise ValueError(f"its format is {data.get('format')!r}, not {FORMAT!r}")
        run = data["run"]
        events = tuple(_event(item) for item in data["events"])
        return Exported(
            str(run["id"]),
            str(run["workflow"]),
            run.get("version"),
            str(run["input"]),
            str(run["status"]),
            events,
        )
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise PayloadError(
            f"{_shown(source)} is not a run exported by `durably runs export` ({exc}); export "
            "the run again"
        ) from None


def _load(source: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    text = str(source)
    if isinstance(source, Path) or not text.lstrip().startswith("{"):
        text = Path(source).read_text()
    loaded = json.loads(text)
    if not isinstance(loaded, dict):
        raise ValueError("a JSON object was expected")
    return loaded


def _event(item: Mapping[str, Any]) -> Event:
    at = datetime.fromisoformat(item["at"])
    if at.tzinfo is None:
        raise ValueError(f"event {item['seq']}'s time has no time zone")
    return Event(
        int(item["seq"]),
        EventKind(item["kind"]),
        at,
        item.get("position"),
        item.get("name"),
        item.get("attempt"),
        item.get("data"),
    )


def _shown(source: object) -> str:
    if isinstance(source, Mapping):
        return "the data given"
    text = str(source)
    return repr(text if len(text) <= 60 else text[:59] + "…")
