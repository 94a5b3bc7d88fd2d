"""The server's bulk jobs (durably.client.bulk): each job a person asks for through the API or
the dashboard runs on a thread of its own, named for it, until it is finished or the server
stops; the jobs left unfinished (by a server that stopped, a CLI that was killed) are resumed
when the server starts. A store that cannot be reached pauses a job, which is tried again."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from durably.client.client import Client
from durably.errors import DurablyError, StoreError

__all__ = ["BulkJobs"]

log = logging.getLogger("durably.server")

_AGAIN = timedelta(seconds=5)  # after the store could not be reached
_JOIN = 10.0  # seconds a stopping server waits for a job's thread to end its run's action


class BulkJobs:
    """Threads running bulk jobs on `client`'s store (the app's client: each run is acted on
    as the job's person, through the job's way in)."""

    def __init__(self, client: Callable[[], Client]) -> None:
        self._client = client
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def resume_unfinished(self) -> None:
        """Run every unfinished job (the server starts)."""
        try:
            unfinished = self._client().bulk.jobs(limit=1000, unfinished=True)
        except DurablyError as exc:
            log.warning("cannot look for unfinished bulk jobs to resume: %s", exc)
            return
        for job in unfinished:
            log.info("resuming bulk job %s (%s of %s runs done)", job.id, job.done, job.total)
            self.submit(job.id)

    def submit(self, job_id: str) -> None:
        """Run the job on a thread of its own, unless one runs it already."""
        with self._lock:
            running = self._threads.get(job_id)
            if self._stopping.is_set() or (running is not None and running.is_alive()):
                return
            thread = threading.Thread(
                target=self._run, args=(job_id,), name=f"durably-{job_id}", daemon=True
            )
            self._threads[job_id] = thread
        thread.start()

    def running(self) -> list[str]:
        """The ids of the jobs whose threads run now."""
        with self._lock:
            return [job_id for job_id, thread in self._threads.items() if thread.is_alive()]

    def stop(self) -> None:
        """Stop every job between two runs (each stays unfinished, resumed at next start)."""
        self._stopping.set()
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(_JOIN)

    def _run(self, job_id: str) -> None:
        while not self._stopping.is_set():
            try:
                job = self._client().bulk.run(job_id, stop=self._stopping.is_set)
            except StoreError as exc:
                log.warning("bulk job %s waits for the store: %s", job_id, exc)
                self._stopping.wait(_AGAIN.total_seconds())
                continue
            except Exception:
                log.exception("bulk job %s stopped; it stays unfinished", job_id)
                return
            if job.finished:
                log.info(
                    "bulk job %s finished: %s acted on, %s skipped", job_id, job.acted, job.skipped
                )
            return
