"""`prism ingest` on the fleet: one ingest task per source file, run by the workers (in this
process when no broker is configured), the corpus manifest written once they are all done."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext

from celery import Celery

from prism.ingest import Chunking
from workers.app import make_app
from workers.corpus import IngestSummary, Source, ingest_source
from workers.embedded import embedded_worker
from workers.messages import IngestJob
from workers.settings import Settings
from workers.store import open_store

TASK = "prism.ingest_file"
POLL_S = 0.2


def ingest(
    source: str,
    corpus: str,
    settings: Settings,
    chunking: Chunking,
    meta: str | None = None,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> IngestSummary:
    """Every filing file of ``source`` into the corpus, one fleet task per file; each filing's
    chunk input for the configured segment budget is stored with it."""
    target = open_store(corpus, settings)
    origin = open_store(source, settings) if source.startswith("s3://") else source
    app = make_app(settings)

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
            )
            for item in items
        ]
        yield from _run(app, jobs, on_progress)

    with embedded_worker(app, settings.embedded_workers) if settings.embedded else nullcontext():
        return ingest_source(origin, target, chunking, meta, dispatch=dispatch)


def _run(app: Celery, jobs: list[IngestJob], on_progress: Callable[[int, int], None]) -> Iterator[IngestSummary]:
    """Send every job, then give each file's summary as its task ends."""
    pending = [(job, app.send_task(TASK, args=[job.model_dump(mode="json")])) for job in jobs]
    done, total = 0, len(pending)
    on_progress(done, total)
    while pending:
        still = []
        for job, result in pending:
            if not result.ready():
                still.append((job, result))
                continue
            value = result.get(propagate=False, disable_sync_subtasks=False)  # ready: it does not block
            result.forget()
            done += 1
            if isinstance(value, BaseException):  # the task base stores every failure; this is the broker's
                yield IngestSummary(sources=1, failed=1, failures=[f"{job.uri}: {type(value).__name__}: {value}"])
            else:
                yield IngestSummary.model_validate(value)
        if len(still) != len(pending):
            on_progress(done, total)
        pending = still
        if pending:
            time.sleep(POLL_S)
