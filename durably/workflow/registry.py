"""The workflows, steps and dependency policies an app defines: what a worker can run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durably.core.queues import DEFAULT_QUEUE, Queue
from durably.errors import ConfigError, UnknownWorkflow
from durably.resilience import Dependency
from durably.workflow.definitions import Schedule, Step, Workflow

__all__ = ["Registry"]


class Registry:
    """Definitions by name. Names are what runs and histories record, so they are unique."""

    def __init__(self) -> None:
        self.workflows: dict[str, Workflow] = {}
        self.steps: dict[str, Step] = {}
        self.dependencies: dict[str, Dependency] = {}
        self.schedules: dict[str, Schedule] = {}
        self.queues: dict[str, Queue] = {}

    def add_workflow(self, definition: Workflow) -> Workflow:
        _check_free(definition.name, definition.fn, self.workflows, "workflow")
        self.workflows[definition.name] = definition
        return definition

    def add_step(self, definition: Step) -> Step:
        _check_free(definition.name, definition.fn, self.steps, "step")
        self.steps[definition.name] = definition
        return definition

    def add_schedule(self, schedule: Schedule) -> None:
        if schedule.name in self.schedules:
            raise ConfigError(
                f"two schedules are named {schedule.name!r}; give one of them another name "
                "with @app.schedule(name=...)"
            )
        self.schedules[schedule.name] = schedule

    def add_queue(self, queue: Queue) -> Queue:
        if self.queues.get(queue.name, queue) != queue:
            raise ConfigError(
                f"the queue {queue.name!r} is declared twice with different limits; declare it once"
            )
        self.queues[queue.name] = queue
        return queue

    def queue_of(self, name: str | None, workflow: Workflow) -> str | None:
        """The queue a run of `workflow` goes on, as stored (None: the default queue): `name`,
        else the workflow's. ConfigError for a queue this app did not declare."""
        chosen = name if name is not None else workflow.queue
        if chosen is None or chosen == DEFAULT_QUEUE:
            return None
        if chosen not in self.queues:
            declared = ", ".join(sorted(self.queues)) or "none"
            raise ConfigError(
                f"no queue named {chosen!r} is declared by this app (declared: {declared}); "
                f"declare it with app.queue({chosen!r}, ...) before starting runs on it"
            )
        return chosen

    def workflow_named(self, name: str) -> Workflow:
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise UnknownWorkflow(
                f"no workflow named {name!r} is registered with this app (known: {known})"
            ) from None

    def step_named(self, name: str) -> Step | None:
        return self.steps.get(name)

    def workflow_names(self) -> list[str]:
        return list(self.workflows)

    def serves(self) -> dict[str, tuple[str, ...]]:
        """Each workflow's name and the versions of its runs this code runs (a worker claims
        only those)."""
        return {name: tuple(sorted(w.serves)) for name, w in self.workflows.items()}

    def dependency_policy(self, name: str) -> Dependency:
        """The policy for `name`; a dependency nobody configured gets a default breaker."""
        return self.dependencies.setdefault(name, Dependency())


def _check_free(name: str, fn: Callable[..., Any], taken: dict[str, Any], kind: str) -> None:
    if not name:
        raise ConfigError(f"a {kind} needs a name: pass name=...")
    if name in taken and taken[name].fn is not fn:
        raise ConfigError(
            f"two {kind}s are named {name!r}; give one of them another name with name=..."
        )
