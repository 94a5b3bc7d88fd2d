"""Updates: a caller changes a running workflow's state and gets the handler's answer back in
one call (Temporal's updates, for durably's function workflows). Pure: the message a caller
sends, the answer the run records, and where each is kept.

A caller sends an inbox message of kind "update" ({"id", "args"}), ordered with signals; the
lease holder folds it into the history like any message. Workflow code registers handlers with
`@durably.update`; the engine applies a waiting update at the workflow's next durable call
that is new (a step that runs, a wait that waits): its validator first (which may refuse), then
its handler, whose value is the answer. The answer is recorded as an event of the run
(`durably.update:<id>`, durably.core.outputs) with the position it was applied at, in the
run's next commit, and the caller, waiting on that event, gets it. A replay applies each
recorded update again at its recorded position (the handler's changes to the workflow's
variables are rebuilt; its answer is not recorded again), so an update accepted before a crash
is answered once, with the same value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from durably.errors import UpdateRefused

__all__ = ["ANSWER_PREFIX", "UPDATE_KIND", "Answer", "Request", "answer_key", "is_answer_key"]

UPDATE_KIND = "update"  # the inbox message kind Client.update sends
ANSWER_PREFIX = "durably.update:"  # the event key an update's answer is recorded under


def answer_key(update_id: str) -> str:
    return ANSWER_PREFIX + update_id


def is_answer_key(key: str) -> bool:
    return key.startswith(ANSWER_PREFIX)


@dataclass(frozen=True, slots=True)
class Request:
    """An update as its message carries it: its id and its arguments as a JSON list."""

    id: str
    args: list[Any]

    def to_data(self) -> dict[str, Any]:
        return {"id": self.id, "args": self.args}

    @classmethod
    def from_json(cls, text: str | None) -> Request | None:
        """The request an update message's data holds (None: not one this engine can read)."""
        try:
            data = json.loads(text or "null")
            if not isinstance(data, dict) or not isinstance(data.get("id"), str):
                return None
            args = data.get("args", [])
            return cls(data["id"], args) if isinstance(args, list) else None
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Answer:
    """What the run answered an update, and where its code applied it.

    `value` is the handler's value as JSON; or `refused_by` says which of "validator" and
    "handler" raised (`error_class`, `message`). A refusal by the validator changed nothing;
    a handler that raised may have changed the workflow's variables first, so a replay runs it
    again too."""

    at: int
    value: str | None = None
    refused_by: str | None = None
    error_class: str | None = None
    message: str | None = None

    def to_json(self) -> str:
        if self.refused_by is None:
            return f'{{"at": {self.at}, "value": {self.value}}}'  # the value is JSON already
        refusal = {"by": self.refused_by, "error_class": self.error_class, "message": self.message}
        return json.dumps({"at": self.at, "refused": refusal})

    @classmethod
    def from_json(cls, text: str) -> Answer:
        return cls.from_data(json.loads(text))

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Answer:
        refused = data.get("refused")
        if refused is None:
            return cls(data["at"], json.dumps(data.get("value")))
        return cls(data["at"], None, refused["by"], refused["error_class"], refused["message"])

    def result(self, name: str) -> Any:
        """The handler's value; UpdateRefused if the run refused the update."""
        if self.refused_by is not None:
            by = "its validator" if self.refused_by == "validator" else "its handler"
            raise UpdateRefused(
                f"update {name!r} was refused by {by}: {self.error_class}: {self.message}",
                name=name,
                by=self.refused_by,
                error_class=self.error_class or "",
                detail=self.message or "",
            )
        return json.loads(self.value or "null")
