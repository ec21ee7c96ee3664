"""The job tasks, happy paths only: what an exception becomes is tasks/base.py's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import structlog
from celery import chord, shared_task

from prism.models import CallRecord, Ranking, SegmentOutcome
from prism.ranking.strategies import chunks
from tasks.base import JobTask, QueryTask
from workers.messages import AggregateJob, ChunkJob, DocumentJob, Priority, SegmentJob, TaskName
from workers.runtime import Runtime

log = structlog.get_logger("prism")


class DocumentTask(QueryTask):
    message = DocumentJob


class SegmentTask(JobTask):
    """A segment never fails its chord: a failure is a segment outcome the aggregation reads."""

    message = SegmentJob

    def failed(self, seg: SegmentJob, args: tuple, error: str) -> dict:
        return SegmentOutcome(level=seg.level, segment=seg.number, calls=self.paid(seg), error=error).model_dump(
            mode="json"
        )

    def skipped(self, seg: SegmentJob, args: tuple, error: None) -> dict:
        outcome = SegmentOutcome(level=seg.level, segment=seg.number, calls=self.paid(seg), budget_exhausted=True)
        return outcome.model_dump(mode="json")


class AggregateTask(JobTask):
    message = AggregateJob

    def failed(self, agg: AggregateJob, args: tuple, error: str) -> None:
        self.runtime.ledger(agg.job.results).failure(agg.job, error, self.paid(agg, _segment_calls(agg, args)))

    def skipped(self, agg: AggregateJob, args: tuple, error: None) -> None:
        self.runtime.ledger(agg.job.results).skipped(agg.job, self.paid(agg, _segment_calls(agg, args)))


class WholeTask(JobTask):
    """A query whose chunks fit one segment (every query of a $0 ranker): ranked and stored in
    one task, with no chord to wait on."""

    message = SegmentJob

    def failed(self, seg: SegmentJob, args: tuple, error: str) -> None:
        self.runtime.ledger(seg.job.results).failure(seg.job, error, self.paid(seg))

    def skipped(self, seg: SegmentJob, args: tuple, error: None) -> None:
        self.runtime.ledger(seg.job.results).skipped(seg.job, self.paid(seg))


def _outcomes(args: tuple) -> list[SegmentOutcome]:
    return [SegmentOutcome.model_validate(o) for o in args[0]]


def _segment_calls(agg: AggregateJob, args: tuple) -> list[CallRecord]:
    return [c for o in [*agg.earlier, *_outcomes(args)] for c in o.calls]


@shared_task(name=TaskName.RANK_DOCUMENTS, bind=True, base=DocumentTask, ignore_result=True)
def rank_documents(self: DocumentTask, message: dict) -> None:
    job, started = DocumentJob.model_validate(message), datetime.now(UTC)
    ranker = self.runtime.ranker(job.config, "documents")
    ranking = ranker.rank(job.question, job.candidates, len(job.candidates))
    ranking = ranking.model_copy(update={"ranker": chunks.ranked_by(ranking, ranker)})
    self.runtime.checkpoint("store")
    self.runtime.ledger(job.results).result(job, ranking, self.paid(job), started, len(job.candidates))
    log.info("job done", flags=ranking.flags)


@shared_task(name=TaskName.RANK_SEGMENT, bind=True, base=SegmentTask)
def rank_segment(self: SegmentTask, message: dict) -> dict:
    return _ranked(self.runtime, SegmentJob.model_validate(message)).model_dump(mode="json")


@shared_task(name=TaskName.AGGREGATE_SEGMENTS, bind=True, base=AggregateTask, ignore_result=True)
def aggregate_segments(self: AggregateTask, outcomes: list[dict], message: dict) -> None:
    agg = AggregateJob.model_validate(message)
    _aggregate(self.runtime, agg, _outcomes((outcomes,)), lambda: self.paid(agg, _segment_calls(agg, (outcomes,))))


@shared_task(name=TaskName.RANK_WHOLE, bind=True, base=WholeTask, ignore_result=True)
def rank_whole(self: WholeTask, message: dict) -> None:
    seg = SegmentJob.model_validate(message)
    _aggregate(self.runtime, AggregateJob(job=seg.job, level=0), [_ranked(self.runtime, seg)], lambda: self.paid(seg))


def _ranked(rt: Runtime, seg: SegmentJob) -> SegmentOutcome:
    """One segment ranked: its winners, or why there are none, with the calls of its earlier tries."""
    data = rt.chunk_input(seg.job)
    outcome = chunks.rank_segment(
        rt.ranker(seg.job.config, "segments"), data, seg.indices, seg.k, seg.level, seg.number
    )
    if outcome.error:
        log.warning("segment failed", error=outcome.error)
    outcome.calls = seg.carried + outcome.calls
    return outcome


def _aggregate(
    rt: Runtime, agg: AggregateJob, current: list[SegmentOutcome], paid: Callable[[], list[CallRecord]]
) -> None:
    """What follows a level's segments: the stored ranking, one more level, or the pool re-rank
    then the stored ranking; a failure or a skip with ``paid()``, the calls made so far."""
    job, level, config = agg.job, agg.level, agg.job.config
    everything = agg.earlier + current
    if any(o.budget_exhausted for o in current):
        rt.ledger(job.results).skipped(job, paid())
        return
    data = rt.chunk_input(job)
    rt.checkpoint("aggregate")
    try:
        step = chunks.after_level(current, data, config.top_n, config.segment_top_k, config.segment_tokens, level)
    except chunks.AllSegmentsFailed as err:
        rt.ledger(job.results).failure(job, f"every segment failed: {err}", paid())
        return
    if isinstance(step, chunks.Level):
        enqueue_level(job, level + 1, step, everything, agg.carried)
        log.info("pool over budget, one more level", segments=len(step.segments))
        return
    if isinstance(step, chunks.Pool):
        final = chunks.rerank(rt.ranker(config, "rerank"), data, step, config.top_n, current, level + 1)
        everything.append(final)
        step = Ranking(indices=final.indices, scores=final.scores)
    ranking = chunks.finish(step.indices, everything, data, step.scores)
    started = min(o.started_at for o in everything if o.started_at)
    segments = sum(1 for o in everything if o.level == 0)
    rt.checkpoint("store")
    calls = [*agg.carried, *(c for o in everything for c in o.calls)]  # the re-rank's are in its outcome
    cited = rt.cited(job, ranking.indices)
    rt.ledger(job.results).result(job, ranking, calls, started, job.n_candidates, segments, level + 1, cited)
    log.info("job done", segments=segments, flags=ranking.flags)


def enqueue_level(
    job: ChunkJob,
    level: int,
    plan: chunks.Level,
    earlier: list[SegmentOutcome] | None = None,
    carried: list[CallRecord] | None = None,
) -> None:
    """One chord per level: every segment in parallel, then the aggregation; a first level of
    one segment is one task."""
    if level == 0 and len(plan.segments) == 1:
        single = SegmentJob(job=job, level=0, number=0, indices=plan.segments[0], k=plan.k)
        rank_whole.apply_async((single.model_dump(mode="json"),), priority=Priority.FIRST_ROUND)
        return
    priority = Priority.FIRST_ROUND if level == 0 else Priority.FOLLOW_UP
    header = [
        rank_segment.s(SegmentJob(job=job, level=level, number=i, indices=seg, k=plan.k).model_dump(mode="json")).set(
            priority=priority
        )
        for i, seg in enumerate(plan.segments)
    ]
    callback = AggregateJob(job=job, level=level, earlier=list(earlier or []), carried=list(carried or []))
    body = aggregate_segments.s(callback.model_dump(mode="json")).set(priority=Priority.FOLLOW_UP)
    chord(header, body).apply_async()
