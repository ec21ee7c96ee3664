"""Celery tasks: decode the message, call prism, store what came out."""

from __future__ import annotations

from datetime import UTC, datetime

import structlog
from botocore.exceptions import BotoCoreError
from celery import chord, shared_task

from prism.llm import recording
from prism.models import Ranking, SegmentOutcome
from prism.strategies import chunks
from tasks.messages import AggregateJob, ChunkJob, DocumentJob, Job, SegmentJob
from workers import logs, runtime

# Storage hiccups are retried by Celery; LLM errors are handled (and accounted) inside prism.
_TRANSIENT = dict(autoretry_for=(ConnectionError, TimeoutError, BotoCoreError), retry_backoff=True, max_retries=8)


def _bind(task, job: Job, **extra) -> None:
    request = task.request
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(
        run_id=job.run_id, job_id=job.job_id, query_id=job.query_id, task=task.name,
        attempt=request.retries + 1, redelivered=bool((request.delivery_info or {}).get("redelivered")), **extra,
    )  # fmt: skip


@shared_task(name="prism.rank_documents", bind=True, ignore_result=True, **_TRANSIENT)
def rank_documents(self, message: dict) -> None:
    job = DocumentJob.model_validate(message)
    _bind(self, job)
    rt, started = runtime.get(), datetime.now(UTC)
    with recording() as calls:
        try:
            ranking = rt.ranker(job, "documents").rank(job.question, job.candidates, len(job.candidates))
        except Exception as err:  # noqa: BLE001 - every failure lands in failures.jsonl with its calls
            logs.get().warning("job failed", error=str(err))
            rt.save_failure(job, f"{type(err).__name__}: {err}", calls)
            return
    rt.save_result(job, ranking, calls, started, len(job.candidates))
    logs.get().info("job done", calls=len(calls), flags=ranking.flags)


@shared_task(name="prism.rank_segment", bind=True, **_TRANSIENT)
def rank_segment(self, message: dict) -> dict:
    seg = SegmentJob.model_validate(message)
    _bind(self, seg.job, level=seg.level, segment=seg.number)
    rt = runtime.get()
    data = rt.chunk_input(seg.job)
    outcome = chunks.rank_segment(rt.ranker(seg.job, "segments"), data, seg.indices, seg.k, seg.level, seg.number)
    if outcome.error:
        logs.get().warning("segment failed", error=outcome.error)
    return outcome.model_dump(mode="json")


@shared_task(name="prism.aggregate_segments", bind=True, ignore_result=True, **_TRANSIENT)
def aggregate_segments(self, outcomes: list[dict], message: dict) -> None:
    agg = AggregateJob.model_validate(message)
    job, level = agg.job, agg.level
    _bind(self, job, level=level)
    rt, config = runtime.get(), job.config
    data = rt.chunk_input(job)
    current = [SegmentOutcome.model_validate(o) for o in outcomes]
    everything = agg.carried + current
    try:
        step = chunks.after_level(current, data, config.top_n, config.segment_top_k, config.segment_tokens, level)
    except chunks.AllSegmentsFailed as err:
        rt.save_failure(job, f"every segment failed: {err}", [c for o in everything for c in o.calls])
        return
    if isinstance(step, chunks.Level):
        enqueue_level(job, level + 1, step, everything)
        logs.get().info("pool over budget, one more level", segments=len(step.segments))
        return
    if isinstance(step, chunks.Pool):
        final = chunks.rerank(rt.ranker(job, "rerank"), data, step, config.top_n, current, level + 1)
        everything.append(final)
        step = Ranking(indices=final.indices)
    ranking = chunks.finish(step.indices, everything, data)
    started = min(o.started_at for o in everything if o.started_at)
    segments = sum(1 for o in everything if o.level == 0)
    rt.save_result(job, ranking, [c for o in everything for c in o.calls], started, job.n_candidates, segments, level + 1)
    logs.get().info("job done", segments=segments, flags=ranking.flags)


def enqueue_level(job: ChunkJob, level: int, plan: chunks.Level, carried: list[SegmentOutcome] = ()) -> None:
    """One chord per level: every segment in parallel, then the aggregation."""
    header = [
        rank_segment.s(SegmentJob(job=job, level=level, number=i, indices=seg, k=plan.k).model_dump(mode="json"))
        for i, seg in enumerate(plan.segments)
    ]
    callback = aggregate_segments.s(AggregateJob(job=job, level=level, carried=list(carried)).model_dump(mode="json"))
    chord(header, callback).apply_async()


def enqueue_documents(job: DocumentJob) -> None:
    rank_documents.delay(job.model_dump(mode="json"))
