"""`prism ingest` on the fleet: one ingest task per source file, run by the workers (in this
process when no broker is configured), the corpus manifest written once they are all done."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext

from celery import Celery
from celery.result import ResultSet

from prism.ingest import Chunking
from workers.app import make_app, reach_broker
from workers.corpus import IngestSummary, Source, ingest_source
from workers.embedded import embedded_worker
from workers.messages import IngestJob, TaskName
from workers.settings import Settings
from workers.store import open_store

POLL_S = 0.05  # one bulk read of the result backend per poll: cheap, and a small re-ingest ends sooner


def ingest(
    source: str,
    corpus: str,
    settings: Settings,
    chunking: Chunking,
    meta: str | None = None,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    on_note: Callable[[str], None] = lambda text: None,
) -> IngestSummary:
    """Every filing file of ``source`` into the corpus, one fleet task per file; each filing's
    chunk input for the configured segment budget is stored with it."""
    target = open_store(corpus, settings)
    origin = open_store(source, settings) if source.startswith("s3://") else source
    app = make_app(settings, tasks=("tasks.ingest",))
    if not settings.embedded:
        reach_broker(app)

    def dispatch(items: list[Source]) -> Iterator[IngestSummary]:
        jobs = [
            IngestJob(
                corpus=target.uri,
                name=item.name,
                uri=item.uri,
                record=item.record,
                chunking=chunking,
                meta=meta,
                segment_tokens=settings.segment_tokens,
                fingerprint=item.fingerprint,
                exhibits=[(e.uri, e.type) for e in item.exhibits],
            )
            for item in items
        ]
        yield from _run(app, jobs, settings.stall_s, on_progress, on_note)

    with embedded_worker(app, settings.embedded_workers) if settings.embedded else nullcontext():
        return ingest_source(origin, target, chunking, meta, dispatch=dispatch)


def _run(
    app: Celery,
    jobs: list[IngestJob],
    quiet_s: float,
    on_progress: Callable[[int, int], None],
    on_note: Callable[[str], None],
) -> list[IngestSummary]:
    """Send every job, then collect each file's summary as its task ends (one bulk read of the
    result backend per poll, however many are pending). Says so once when none ends for a while."""
    results = ResultSet(
        [app.send_task(TaskName.INGEST_FILE, args=[job.model_dump(mode="json")]) for job in jobs], app=app
    )
    source_of = {result.id: job.uri for result, job in zip(results.results, jobs)}
    summaries: list[IngestSummary] = []
    on_progress(0, len(jobs))
    moved, said = time.monotonic(), False

    def arrived(task_id: str, value: object) -> None:
        nonlocal moved
        moved = time.monotonic()
        if isinstance(value, BaseException):  # the task base stores every failure; this is the broker's
            failure = f"{source_of[task_id]}: {type(value).__name__}: {value}"
            reason = f"{type(value).__name__}: {value}"
            summaries.append(
                IngestSummary(sources=1, failed=1, failures=[failure], failed_sources={source_of[task_id]: reason})
            )
        else:
            summaries.append(IngestSummary.model_validate(value))
        on_progress(len(summaries), len(jobs))

    def waiting() -> None:
        nonlocal said
        if not said and time.monotonic() - moved > quiet_s:
            said = True
            on_note(
                f"no ingest task has ended for {quiet_s:.0f} s (PRISM_STALL_S): are workers running (celery -A workers.app worker)?"
            )

    # the embedded worker runs in this process: the join waits on results that are not its own subtasks
    results.join_native(
        propagate=False, interval=POLL_S, callback=arrived, on_interval=waiting, disable_sync_subtasks=False
    )
    results.forget()
    return summaries
