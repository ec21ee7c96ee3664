"""Segmented chunk ranking.

A filing's chunks are cut into segments that fit the token budget; each segment is ranked on
its own for its top k; the winners are pooled and the pool re-ranked into the final top n. A
pool over the budget is cut and ranked again (one more level) until it fits. The steps are
separate functions so the fleet can run each segment as its own task; :func:`rank_chunks` runs
them all in one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import zip_longest

from pydantic import BaseModel

from prism.llm import ContextTooLong, Deferred, recording
from prism.models import Flag, Ranker, Ranking, SegmentOutcome
from prism.ranking.hybrid import prefilter, within_budget
from prism.segmenting import MARKER_TOKENS, TokenCounter, plan_segments

MAX_LEVELS = 4
MAX_CHUNK_SHARE = 4  # a chunk is cut to at most a quarter of the segment budget
MAX_CUTS = 6  # a lone chunk over the model's context is halved at most this many times


class ChunkInput(BaseModel):
    """A chunk query as workers need it; stored once and shared by all of its segment tasks."""

    question: str
    chunks: list[str]
    costs: list[int]  # prompt tokens per chunk, marker included
    truncated: list[int] = []  # chunks cut to fit the budget
    exact_counts: bool = True
    origin: list[int] | None = None  # after a pre-filter: each kept chunk's index in the filing


def prepare(
    question: str,
    chunks: Sequence[str],
    counter: TokenCounter,
    budget: int,
    keep: int | None = None,
    dense="financial",
    counts: Sequence[int] | None = None,
    share: float | None = None,
) -> ChunkInput:
    """Keep the best chunks by the pre-filter scorer (``dense``) when asked: the best ``keep``, or
    the best that fit in ``share`` of the filing's tokens; count every chunk's tokens (unless
    ``counts`` gives them, by the same counter), and cut any chunk that alone would overflow a
    segment."""
    sizes = list(counts) if counts is not None and len(counts) == len(chunks) else None
    origin = None
    if share is not None and chunks:
        sizes = sizes or counter.count_many(chunks)
        origin = prefilter(question, chunks, dense=dense, share=share, costs=sizes)
    elif keep and len(chunks) > keep:
        origin = prefilter(question, chunks, keep, dense)
    texts, truncated = ([chunks[i] for i in origin] if origin is not None else list(chunks)), []
    if sizes is not None and origin is not None:
        sizes = [sizes[i] for i in origin]
    costs = [n + MARKER_TOKENS for n in (sizes if sizes is not None else counter.count_many(texts))]
    # A chunk may take a share of a segment, not all of it: cut to the whole budget, it could
    # never be pooled with other segments' winners, and would drop out of the final ranking.
    most = max(MARKER_TOKENS + 16, budget // MAX_CHUNK_SHARE)
    for i, cost in enumerate(costs):
        if cost > most:
            texts[i] = counter.truncate(texts[i], most - MARKER_TOKENS)
            costs[i] = most
            truncated.append(i)
    return ChunkInput(
        question=question, chunks=texts, costs=costs, truncated=truncated, exact_counts=counter.exact, origin=origin
    )


@dataclass(frozen=True)
class Level:
    """Segments to rank next, and how many winners each keeps."""

    segments: list[list[int]]
    k: int


def first_level(costs: Sequence[int], top_n: int, k: int, budget: int | None) -> Level:
    """The first segments of chunks of these prompt costs: as many as the budget needs; one
    with no budget (a $0 ranker)."""
    everything = range(len(costs))
    segments = [list(everything)] if budget is None else plan_segments(everything, costs, budget)
    return Level(segments, top_n if len(segments) == 1 else k)  # one segment: its ranking is final


def rank_segment(
    ranker: Ranker, data: ChunkInput, segment: Sequence[int], k: int, level: int, number: int
) -> SegmentOutcome:
    """Rank one segment; failures are kept in the outcome so the other segments still count.
    Deferred (rate limit, budget) is not a failure and goes up to the task."""
    started = datetime.now(UTC)
    with recording() as calls:
        try:
            indices, ranking = _rank_fitting(ranker, data, list(segment), k)
        except Deferred:
            raise
        except Exception as err:  # noqa: BLE001 - reported in the outcome, the query is marked degraded
            error = f"{type(err).__name__}: {err}"
            return SegmentOutcome(level=level, segment=number, started_at=started, calls=calls, error=error)
    return SegmentOutcome(
        level=level,
        segment=number,
        started_at=started,
        indices=indices,
        scores=ranking.scores,
        flags=ranking.flags,
        notes=[f"segment {level}.{number}: {n}" for n in ranking.notes],
        calls=calls,
        details=_positions(ranking.details, list(segment)),
        ranker=ranked_by(ranking, ranker),
    )


def _rank_fitting(ranker: Ranker, data: ChunkInput, segment: list[int], k: int) -> tuple[list[int], Ranking]:
    """Rank the segment; when the model says the prompt is over its context, rank each half,
    then rank the halves' winners together (they are fewer), so the answer is still one
    ranking of at most k. A lone chunk is cut until it fits."""
    try:
        ranking = ranker.rank(data.question, [data.chunks[i] for i in segment], k)
        return [segment[j] for j in ranking.indices], ranking
    except ContextTooLong:
        if len(segment) < 2:
            return _rank_cut(ranker, data, segment, k)
        half = len(segment) // 2
        left, left_ranking = _rank_fitting(ranker, data, segment[:half], k)
        right, right_ranking = _rank_fitting(ranker, data, segment[half:], k)
        halves = [left_ranking, right_ranking]
        notes = [f"over the model context: split {len(segment)} chunks in two"]
        if len(left) + len(right) <= k:
            merged = left + right
        elif len(left) + len(right) < len(segment):
            merged, together = _rank_fitting(ranker, data, left + right, k)
            halves.append(together)
        else:  # the winners are no fewer than the chunks: alternate the halves' orders
            merged = [i for pair in zip_longest(left, right) for i in pair if i is not None][:k]
            notes.append("the halves' winners could not be ranked together; alternated their orders")
        flags = list(dict.fromkeys(f for r in halves for f in r.flags))
        return merged, Ranking(indices=[], flags=flags, notes=notes + [n for r in halves for n in r.notes])


def _rank_cut(ranker: Ranker, data: ChunkInput, segment: list[int], k: int) -> tuple[list[int], Ranking]:
    """One chunk whose prompt is over the model's context: rank its first half, quarter, ...,
    whichever fits first."""
    counter, tokens = TokenCounter(), data.costs[segment[0]] - MARKER_TOKENS
    for _ in range(MAX_CUTS):
        tokens //= 2
        text = counter.truncate(data.chunks[segment[0]], max(tokens, 1))
        try:
            ranking = ranker.rank(data.question, [text], k)
        except ContextTooLong as err:
            last = err
            continue
        note = f"a chunk alone was over the model context: ranked its first {tokens} tokens"
        return [segment[j] for j in ranking.indices], ranking.flagged("truncated", note=note)
    raise last


class AllSegmentsFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Pool:
    """The winners to re-rank into the final list."""

    indices: list[int]


def after_level(
    outcomes: Sequence[SegmentOutcome], data: ChunkInput, top_n: int, k: int, budget: int, level: int
) -> Ranking | Pool | Level:
    """What follows a level: the final ranking (a single segment), the pool to re-rank, or one
    more level when the pool is still over the budget."""
    done = [o for o in outcomes if o.error is None]
    if not done:
        raise AllSegmentsFailed("; ".join(f"segment {o.level}.{o.segment}: {o.error}" for o in outcomes))
    if level == 0 and len(outcomes) == 1:
        scores = done[0].scores[:top_n] if done[0].scores else None
        return Ranking(indices=done[0].indices[:top_n], scores=scores, details=done[0].details)
    pool = sorted({i for o in done for i in o.indices})
    if sum(data.costs[i] for i in pool) <= budget:
        return Pool(pool)
    if level + 1 >= MAX_LEVELS:  # cannot happen with sane settings; keep the best-placed winners
        return Pool(sorted(within_budget(interleave(done), data.costs, budget)))
    segments = plan_segments(pool, data.costs, budget)
    # Each level must shrink the pool: at most half of it goes on.
    return Level(segments, max(top_n, min(k, len(pool) // (2 * len(segments)))))


def finish(
    indices: list[int], outcomes: Sequence[SegmentOutcome], data: ChunkInput, scores: list[float] | None = None
) -> Ranking:
    """The final ranking in the filing's own chunk numbers, with its scores where the ranker
    gives them, every segment's flags and notes, why it may be incomplete, and the last
    strategy details."""
    flags: list[Flag] = [f for o in outcomes for f in o.flags]
    notes = [n for o in outcomes for n in o.notes]
    failed = [o for o in outcomes if o.error]
    if failed:
        flags.append("degraded")
        notes += [f"segment {o.level}.{o.segment} failed: {o.error}" for o in failed]
    origin = data.origin or list(range(len(data.chunks)))
    if data.truncated:
        flags.append("truncated")
        notes.append(f"chunks cut to fit the segment budget: {[origin[i] for i in data.truncated]}")
    details = next((o.details for o in reversed(outcomes) if o.details), {})
    rankers = dict.fromkeys(o.ranker for o in outcomes if o.ranker and not o.error)
    return Ranking(
        indices=[origin[i] for i in indices],
        scores=scores,
        flags=list(dict.fromkeys(flags)),
        notes=notes,
        details=_positions(details, origin),
        ranker="+".join(rankers) or None,
    )


def _positions(details: dict, mapping: list[int]) -> dict:
    """Details whose "evidence" indices are read through ``mapping`` (segment -> filing)."""
    if "evidence" not in details:
        return details
    return details | {"evidence": [mapping[i] for i in details["evidence"]]}


def rerank(
    ranker: Ranker, data: ChunkInput, pool: Pool, top_n: int, outcomes: Sequence[SegmentOutcome], level: int
) -> SegmentOutcome:
    """Re-rank the pool; if that call fails for good, fall back to the segments' own order."""
    final = rank_segment(ranker, data, pool.indices, top_n, level, 0)
    if final.error:
        fallback = interleave([o for o in outcomes if o.error is None])[:top_n]
        return final.model_copy(
            update={
                "indices": fallback,
                "error": None,
                "flags": ["degraded"],
                "notes": [f"pool re-rank failed ({final.error}); kept the segments' own order"],
                "ranker": "segments-order",
            }
        )
    return final


def ranked_by(ranking: Ranking, ranker: Ranker) -> str:
    """Who ordered a ranking: what it says of itself (an LLM reply, repaired or fallen back; a
    cascade's answering stage), else the ranker's name."""
    return ranking.ranker or ranking.answered_by or ranker.name


def interleave(outcomes: Sequence[SegmentOutcome]) -> list[int]:
    """Every segment's first winner, then every second, and so on."""
    ranked = zip_longest(*(o.indices for o in outcomes))
    return list(dict.fromkeys(i for row in ranked for i in row if i is not None))


def rank_chunks(
    segments: Ranker, pool_ranker: Ranker, data: ChunkInput, top_n: int, k: int, budget: int
) -> tuple[Ranking, list[SegmentOutcome]]:
    """The whole segmented ranking in this process: every level, then the pool re-rank."""
    step: Ranking | Pool | Level = first_level(data.costs, top_n, k, budget)
    outcomes: list[SegmentOutcome] = []
    level = 0
    while isinstance(step, Level):
        current = [rank_segment(segments, data, seg, step.k, level, i) for i, seg in enumerate(step.segments)]
        outcomes += current
        step = after_level(current, data, top_n, k, budget, level)
        level += 1
    if isinstance(step, Pool):
        final = rerank(pool_ranker, data, step, top_n, current, level)
        outcomes.append(final)
        step = Ranking(indices=final.indices, scores=final.scores)
    return finish(step.indices, outcomes, data, step.scores), outcomes
