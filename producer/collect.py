"""Tasks sent to the fleet and their results collected as they end: one bulk read of the result
backend per poll, however many are pending (ingest and fetch send one task per file)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from celery import Celery
from celery.result import ResultSet
from pydantic import BaseModel

from workers.app import send

POLL_S = 0.05  # cheap, and a small batch ends sooner
Job = TypeVar("Job", bound=BaseModel)


def run_tasks(
    app: Celery,
    task: str,
    jobs: Sequence[Job],
    quiet_s: float,
    on_progress: Callable[[int, int], None],
    on_stall: Callable[[], None],
    on_wait: Callable[[], None] = lambda: None,
) -> Iterator[tuple[Job, object]]:
    """Send a task per job, then give each job with its task's result (an exception when the
    broker failed it: the task bases store every other failure) as it ends. ``on_stall`` is
    called once when none has ended for ``quiet_s``; ``on_wait`` at every poll."""
    if not jobs:
        return
    results = ResultSet([send(app, task, job) for job in jobs], app=app)
    job_of = {result.id: job for result, job in zip(results.results, jobs, strict=True)}
    on_progress(0, len(jobs))
    moved, said = time.monotonic(), False

    def waiting() -> None:
        nonlocal said
        on_wait()
        if not said and time.monotonic() - moved > quiet_s:
            said = True
            on_stall()

    # the embedded worker runs in this process: the results are not its own subtasks'
    for done, (task_id, meta) in enumerate(results.iter_native(interval=POLL_S, on_interval=waiting), start=1):
        moved = time.monotonic()
        yield job_of[task_id], meta["result"]
        on_progress(done, len(jobs))
    results.forget()
