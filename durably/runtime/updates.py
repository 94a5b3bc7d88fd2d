"""Updates on the worker's side (what they are: durably.core.updates): the handlers a run's
workflow code registered, the update messages its history holds, and the answers it recorded.

Before each durable call of the workflow's code, at position p, `before_call(p, new)`:
  - applies again, in their recorded order, the updates whose answers say they were applied at
    p (a replay rebuilds what their handlers changed; nothing is recorded again);
  - if the call is new (the run is past its history here: a step runs for real, a wait
    waits), applies every update message not answered yet, in inbox order, whose handler is
    registered: the validator, then the handler, and records the answer at p.

A workflow that registers no handler pays one attribute test a call. An update whose name has
no handler yet waits for one; one still waiting when the run ends is never answered, and its
caller hears that the run ended first.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durably.codec.encoding import decode_call, encode, return_hint
from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind, error_class_name
from durably.core.payloads import MessageReceived
from durably.core.updates import UPDATE_KIND, Answer, Request, answer_key, is_answer_key
from durably.errors import ConfigError
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.outputs import RunOutputs
from durably.workflow.context import replaying_only

__all__ = ["Updates"]


@dataclass(frozen=True, slots=True)
class _Handler:
    handler: Callable[..., Any]
    validator: Callable[..., Any] | None


@dataclass(frozen=True, slots=True)
class _Waiting:
    name: str
    request: Request


class Updates:
    """The updates of one run's execution."""

    def __init__(self, writer: HistoryWriter, outputs: RunOutputs) -> None:
        self._writer = writer
        self._outputs = outputs
        self._handlers: dict[str, _Handler] = {}
        self._seen = 0  # events of the history read so far
        self._requests: dict[str, _Waiting] = {}  # every update message, by id, in order
        self._answers: dict[str, Answer] = {}  # recorded (or made) answers, by update id
        self._replayed: set[str] = set()  # recorded answers applied again in this execution

    def register(
        self, name: str, handler: Callable[..., Any], validator: Callable[..., Any] | None
    ) -> None:
        for what, fn in (("handler", handler), ("validator", validator)):
            if fn is not None and (inspect.iscoroutinefunction(fn) or not callable(fn)):
                raise ConfigError(
                    f"the {what} of update {name!r} must be a plain function (def, not async "
                    "def): it changes or checks the workflow's variables and returns"
                )
        self._handlers[name] = _Handler(handler, validator)

    def before_call(self, position: int, new: bool) -> None:
        if not self._handlers:
            return
        self._read_history()
        for update_id, answer in list(self._answers.items()):
            if answer.at == position and update_id not in self._replayed:
                self._replayed.add(update_id)
                self._apply_again(update_id, answer)
        if new and not replaying_only():
            for update_id, waiting in list(self._requests.items()):
                if update_id not in self._answers and waiting.name in self._handlers:
                    self._apply(position, waiting)

    # -- the history --------------------------------------------------------------------

    def _read_history(self) -> None:
        events = self._writer.events
        for event in events[self._seen :]:
            self._read(event)
        self._seen = len(events)

    def _read(self, event: Event) -> None:
        if event.kind is EventKind.MESSAGE_RECEIVED:
            message = read_payload(event, MessageReceived)
            if message.kind != UPDATE_KIND or message.name is None:
                return
            request = Request.from_json(message.data)
            if request is not None and request.id not in self._requests:
                self._requests[request.id] = _Waiting(message.name, request)
        elif event.kind is EventKind.EVENT_SET and event.name and is_answer_key(event.name):
            update_id = event.name.removeprefix(answer_key(""))
            # an answer of the history this execution was claimed with (to be applied again
            # at its position), or one this execution made (applied already)
            self._answers.setdefault(update_id, Answer.from_json(event.data or "{}"))

    # -- applying -----------------------------------------------------------------------

    def _apply_again(self, update_id: str, answer: Answer) -> None:
        waiting = self._requests.get(update_id)
        if waiting is None or answer.refused_by == "validator":
            return  # refused before its handler ran: it changed nothing
        handler = self._handlers.get(waiting.name)
        if handler is None:
            return
        try:
            handler.handler(*self._args(waiting, handler.handler))
        except Exception:  # as it did the first time
            return

    def _apply(self, position: int, waiting: _Waiting) -> None:
        name, request = waiting.name, waiting.request
        handler = self._handlers[name]
        answer = self._answer(position, name, request, handler)
        self._answers[request.id] = answer
        self._replayed.add(request.id)
        self._outputs.set_event(answer_key(request.id), answer.to_json())

    def _answer(self, position: int, name: str, request: Request, handler: _Handler) -> Answer:
        """The validator, then the handler: the answer (a refusal if either raised)."""
        try:  # arguments that do not fit the handler are refused before anything runs
            args = self._args(_Waiting(name, request), handler.handler)
            if handler.validator is not None:
                handler.validator(*args)
        except Exception as exc:
            return _refused(position, "validator", exc)
        try:
            value = handler.handler(*args)
            text = encode(
                value, return_hint(handler.handler), what=f"the answer of update {name!r}"
            )
        except Exception as exc:
            return _refused(position, "handler", exc)
        return Answer(position, value=text)

    @staticmethod
    def _args(waiting: _Waiting, handler: Callable[..., Any]) -> list[Any]:
        what = f"update {waiting.name!r}"
        text = json.dumps({"args": waiting.request.args, "kwargs": {}})
        args, _ = decode_call(text, handler, what=what)
        return list(args)


def _refused(position: int, by: str, exc: Exception) -> Answer:
    return Answer(
        position, refused_by=by, error_class=error_class_name(type(exc)), message=str(exc)
    )
