"""Celery tasks: decode the message, call prism, store what came out.

A job ends in exactly one stored outcome: a result, a failure (with its reason and its calls),
or a skip (the run's budget is spent). A rate limit or a storage hiccup is not an outcome: the
job goes back to the queue with a countdown, carrying the calls it already paid for.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import redis
import structlog
from botocore.exceptions import BotoCoreError
from celery import chord, shared_task

from prism import icl
from prism.llm import BudgetExhausted, RateLimited, recording, spending
from prism.models import CallRecord, Ranking, SegmentOutcome
from prism.strategies import chunks
from tasks.messages import AggregateJob, ChunkJob, DocumentJob, Job, SegmentJob
from workers import runtime

log = structlog.get_logger("prism")
# Storage and broker hiccups: worth another try later, not a failure of the job.
TRANSIENT = (BotoCoreError, ConnectionError, TimeoutError, redis.ConnectionError, redis.TimeoutError)
MAX_TRANSIENT_RETRIES = 20


def _bind(task, job: Job, **extra) -> None:
    request = task.request
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(
        run_id=job.run_id,
        job_id=job.job_id,
        query_id=job.query_id,
        task=task.name,
        attempt=request.retries + 1,
        redelivered=bool((request.delivery_info or {}).get("redelivered")),
        **extra,
    )


def _later(task, args: list, calls: list[CallRecord], err: Exception):
    """Put the job back on the queue to run again after a countdown, with this try's calls."""
    message = args[-1]
    message = message | {"carried": message.get("carried", []) + [c.model_dump(mode="json") for c in calls]}
    if isinstance(err, RateLimited):
        countdown = err.retry_in + random.uniform(0, min(5.0, err.retry_in))
    elif task.request.retries >= MAX_TRANSIENT_RETRIES:
        raise err
    else:
        countdown = min(300.0, 2.0**task.request.retries) * random.uniform(0.5, 1.0)
    log.info("job deferred", reason=str(err), countdown=round(countdown, 2))
    raise task.retry(args=[*args[:-1], message], countdown=countdown, max_retries=None)


@shared_task(name="prism.rank_documents", bind=True, ignore_result=True)
def rank_documents(self, message: dict) -> None:
    job = DocumentJob.model_validate(message)
    _bind(self, job)
    rt, started = runtime.get(), datetime.now(UTC)
    with recording() as calls:
        try:
            try:
                with spending(rt.budget(job)), icl.about(job.query_id):
                    ranking = rt.ranker(job, "documents").rank(job.question, job.candidates, len(job.candidates))
            except BudgetExhausted:
                rt.save_skipped(job, job.carried + calls)
                return
            except (RateLimited, *TRANSIENT):
                raise
            except Exception as err:  # noqa: BLE001 - every failure lands in failures.jsonl with its calls
                log.warning("job failed", error=str(err))
                rt.save_failure(job, f"{type(err).__name__}: {err}", job.carried + calls)
                return
            rt.save_result(job, ranking, job.carried + calls, started, len(job.candidates))
        except (RateLimited, *TRANSIENT) as err:
            _later(self, [message], calls, err)
    log.info("job done", calls=len(calls), flags=ranking.flags)


@shared_task(name="prism.rank_segment", bind=True)
def rank_segment(self, message: dict) -> dict:
    seg = SegmentJob.model_validate(message)
    _bind(self, seg.job, level=seg.level, segment=seg.number)
    rt = runtime.get()
    with recording() as calls:
        try:
            data = rt.chunk_input(seg.job)
            with spending(rt.budget(seg.job)), icl.about(seg.job.query_id):
                outcome = chunks.rank_segment(
                    rt.ranker(seg.job, "segments"), data, seg.indices, seg.k, seg.level, seg.number
                )
        except BudgetExhausted:
            outcome = SegmentOutcome(level=seg.level, segment=seg.number, calls=list(calls), budget_exhausted=True)
        except (RateLimited, *TRANSIENT) as err:
            _later(self, [message], calls, err)
    if outcome.error:
        log.warning("segment failed", error=outcome.error)
    outcome.calls = seg.carried + outcome.calls
    return outcome.model_dump(mode="json")


@shared_task(name="prism.aggregate_segments", bind=True, ignore_result=True)
def aggregate_segments(self, outcomes: list[dict], message: dict) -> None:
    agg = AggregateJob.model_validate(message)
    job, level, config = agg.job, agg.level, agg.job.config
    _bind(self, job, level=level)
    rt = runtime.get()
    current = [SegmentOutcome.model_validate(o) for o in outcomes]
    everything = agg.earlier + current

    def spent(*extra: list[CallRecord]) -> list[CallRecord]:
        return agg.carried + [c for o in everything for c in o.calls] + [c for e in extra for c in e]

    if any(o.budget_exhausted for o in current):
        rt.save_skipped(job, spent())
        return
    with recording() as calls:
        try:
            data = rt.chunk_input(job)
            try:
                step = chunks.after_level(
                    current, data, config.top_n, config.segment_top_k, config.segment_tokens, level
                )
            except chunks.AllSegmentsFailed as err:
                rt.save_failure(job, f"every segment failed: {err}", spent())
                return
            if isinstance(step, chunks.Level):
                enqueue_level(job, level + 1, step, everything, agg.carried)
                log.info("pool over budget, one more level", segments=len(step.segments))
                return
            if isinstance(step, chunks.Pool):
                try:
                    with spending(rt.budget(job)), icl.about(job.query_id):
                        final = chunks.rerank(rt.ranker(job, "rerank"), data, step, config.top_n, current, level + 1)
                except BudgetExhausted:
                    rt.save_skipped(job, spent(calls))
                    return
                everything.append(final)
                step = Ranking(indices=final.indices)
            ranking = chunks.finish(step.indices, everything, data)
            started = min(o.started_at for o in everything if o.started_at)
            segments = sum(1 for o in everything if o.level == 0)
            rt.save_result(job, ranking, spent(), started, job.n_candidates, segments, level + 1)
        except (RateLimited, *TRANSIENT) as err:
            _later(self, [outcomes, message], calls, err)
    log.info("job done", segments=segments, flags=ranking.flags)


def enqueue_level(
    job: ChunkJob, level: int, plan: chunks.Level, earlier: list[SegmentOutcome] = (), carried: list[CallRecord] = ()
) -> None:
    """One chord per level: every segment in parallel, then the aggregation."""
    header = [
        rank_segment.s(SegmentJob(job=job, level=level, number=i, indices=seg, k=plan.k).model_dump(mode="json"))
        for i, seg in enumerate(plan.segments)
    ]
    callback = AggregateJob(job=job, level=level, earlier=list(earlier), carried=list(carried))
    chord(header, aggregate_segments.s(callback.model_dump(mode="json"))).apply_async()


def enqueue_documents(job: DocumentJob) -> None:
    rank_documents.delay(job.model_dump(mode="json"))
