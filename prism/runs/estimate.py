"""What a run would cost before any call: prompt tokens from the chunks' token counts as the
prompts will hold them, the expected output per request, and the provider's cache where the
layout lets questions share a filing segment's prefix. One figure per tier, with and without
the cache.

A query is a benchmark row (a :class:`Query`, its candidates counted here), or a chunk query
over a corpus filing as the fleet ranks it (a :class:`Priced`: the question and the token counts
the corpus stores, no text). The pools are priced as chunks spread evenly over the filing, level
by level as the strategy goes; a pre-filter's kept chunks, which depend on the question, are
priced as chunks spread evenly too. Retries and fallbacks are not counted, and every document
query is priced as an LLM call (a cascade sends fewer).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from pydantic import BaseModel

from prism.llm import CACHE_MIN_TOKENS, prefix_id
from prism.llm.pricing import PriceTable
from prism.models import Query, RunConfig, Stage, Usage
from prism.ranking import prompts
from prism.ranking.hybrid import within_budget
from prism.ranking.strategies.chunks import MAX_LEVELS, first_level, prepare
from prism.segmenting import MARKER_TOKENS, TokenCounter, plan_segments

BLOCK_TOKENS = 128  # cached prefixes are read in steps of this many tokens
TIERS = ("standard", "flex", "batch")


class StageEstimate(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # where the layout and the cache key let a prefix be shared
    completion_tokens: int = 0


class Estimate(BaseModel):
    queries: int
    layout: str
    segments: int = 0  # first-level segments of the chunk queries (one a query for a $0 ranker)
    stages: dict[str, StageEstimate]
    usd: dict[str, str]  # per tier (standard, flex, batch), and with the cache ("flex_cached", ...)
    unpriced_models: list[str] = []


@dataclass(frozen=True)
class Priced:
    """A chunk query priced from token counts: ``costs`` are its chunks' prompt tokens (marker
    included), ``shared`` names the chunks (a filing version), so that the questions over them
    share the cached prefix of each segment."""

    question: str
    costs: list[int]
    shared: str


@dataclass
class _Tally:
    """The calls priced so far, and the prefixes already sent once (the provider caches them)."""

    config: RunConfig
    counter: TokenCounter
    expected_output: dict[Stage, int]
    reasoning_share: float
    cacheable: bool
    stages: dict[Stage, StageEstimate] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    overheads: dict[tuple[str, int], int] = field(default_factory=dict)

    def call(self, stage: Stage, question: str, costs: Sequence[int], n: int, task: str, key: str | None) -> None:
        """One request: the template around the chunks, the chunks, the question."""
        asked = self.counter.count(question)
        prompt = self._overhead(task, min(n, len(costs))) + sum(costs) + asked
        s = self.stages.setdefault(stage, StageEstimate())
        s.calls += 1
        s.prompt_tokens += prompt
        s.completion_tokens += self.expected_output.get(stage, 0) + round(self.reasoning_share * prompt)
        if key is not None and self.cacheable and prompt >= CACHE_MIN_TOKENS and key in self.seen:
            # Everything before the question is shared; read in whole blocks.
            s.cached_tokens += max(0, prompt - asked - 8) // BLOCK_TOKENS * BLOCK_TOKENS
        if key is not None:
            self.seen.add(key)

    def _overhead(self, task: str, n: int) -> int:
        """The prompt's own tokens: instructions and output contract, for n answers (the chunks'
        markers are in their costs)."""
        if (task, n) not in self.overheads:
            variant = self.config.doc_prompt if task == "documents" else self.config.chunk_prompt
            template = prompts.load(
                "documents" if task == "documents" else "chunks", variant, self.config.prompt_layout
            )
            messages = template.messages("", [""] * n, n)
            counted = self.counter.count("".join(m["content"] for m in messages)) + 4 * len(messages)
            self.overheads[(task, n)] = max(0, counted - n * MARKER_TOKENS)
        return self.overheads[(task, n)]


def estimate(
    queries: Iterable[Query | Priced],
    config: RunConfig,
    prices: PriceTable,
    expected_output: dict[Stage, int],
    cache_keys: bool = True,
    counter: TokenCounter | None = None,
    reasoning_share: float = 0.0,
) -> Estimate:
    """``expected_output``: output tokens per request by stage; ``reasoning_share``: reasoning
    tokens per prompt token on top of that (a reasoning model thinks more over longer prompts)."""
    counter = counter or TokenCounter()
    cacheable = config.prompt_layout == "question_last" and cache_keys
    tally = _Tally(config, counter, expected_output, reasoning_share, cacheable)
    count = first_segments = 0
    for q in queries:
        count += 1
        if isinstance(q, Query) and q.task == "documents":
            if config.uses_llm("documents"):
                costs = [counter.count(c) + MARKER_TOKENS for c in q.candidates]
                tally.call("documents", q.question, costs, config.top_n, "documents", None)
            continue
        if not config.uses_llm("chunks"):
            first_segments += 1  # a $0 ranker reads the filing in one segment
            continue
        first_segments += _chunk_query(tally, _priced(q, config, counter), config)
    usd, unpriced = _usd(tally.stages, config, prices)
    return Estimate(
        queries=count,
        layout=config.prompt_layout,
        segments=first_segments,
        stages=dict(sorted(tally.stages.items())),
        usd={k: str(v) for k, v in usd.items()},
        unpriced_models=sorted(unpriced),
    )


def _priced(q: Query | Priced, config: RunConfig, counter: TokenCounter) -> Priced:
    """A chunk query as token counts: a row's candidates prepared as the fleet prepares them; a
    corpus pair's counts kept to what a pre-filter would keep."""
    if isinstance(q, Priced):
        return Priced(q.question, kept(q.costs, config), q.shared) if config.prefilters else q
    data = prepare(
        q.question,
        q.candidates,
        counter,
        config.segment_tokens,
        config.prefilter_keep,
        config.dense,
        share=config.prefilter_share,
    )
    return Priced(q.question, data.costs, prefix_id(data.chunks))


def kept(costs: list[int], config: RunConfig) -> list[int]:
    """The chunks a pre-filter keeps, spread evenly over the filing: as many as it keeps, or as
    fit in its share of the tokens."""
    n = len(costs)
    if config.prefilter_keep:
        count = min(n, config.prefilter_keep)
    elif config.prefilter_share:  # chunks spread evenly hold their share of the tokens
        count = min(n, max(1, int(config.prefilter_share * n)))
    else:
        return costs
    return [costs[j * n // count] for j in range(count)] if count else []


def _chunk_query(tally: _Tally, q: Priced, config: RunConfig) -> int:
    """Price one chunk query's segments, then its pools; returns its first-level segments."""
    level = first_level(q.costs, config.top_n, config.segment_top_k, config.segment_tokens)
    for segment in level.segments:
        tally.call("segments", q.question, [q.costs[i] for i in segment], level.k, "chunks", _key(q, segment))
    if len(level.segments) == 1:
        return 1
    # Which chunks win is not known before the calls: price pools of chunks spread evenly over the
    # filing, as many as win, level by level as the strategy goes, until the pool fits one re-rank.
    # Pools are per question: never shared.
    n, budget = len(q.costs), config.segment_tokens
    wins, depth = level.k * len(level.segments), 1
    while True:
        pool = sorted({j * n // wins for j in range(min(wins, n))})
        if sum(q.costs[i] for i in pool) <= budget or depth >= MAX_LEVELS:
            fitting = within_budget(pool, q.costs, budget)
            tally.call("rerank", q.question, [q.costs[i] for i in fitting], config.top_n, "chunks", None)
            return len(level.segments)
        segments = plan_segments(pool, q.costs, budget)
        k = max(config.top_n, min(config.segment_top_k, len(pool) // (2 * len(segments))))
        for segment in segments:
            tally.call("segments", q.question, [q.costs[i] for i in segment], k, "chunks", None)
        wins, depth = k * len(segments), depth + 1


def _key(q: Priced, segment: list[int]) -> str:
    return hashlib.sha256(f"{q.shared}:{segment}".encode()).hexdigest()


def _usd(
    stages: dict[Stage, StageEstimate], config: RunConfig, prices: PriceTable
) -> tuple[dict[str, Decimal], set[str]]:
    usd: dict[str, Decimal] = {}
    unpriced: set[str] = set()
    for tier in TIERS:
        for cached in (False, True):
            total = Decimal(0)
            for stage, s in stages.items():
                usage = Usage(
                    prompt_tokens=s.prompt_tokens,
                    cached_tokens=s.cached_tokens if cached else 0,
                    completion_tokens=s.completion_tokens,
                )
                price = prices.usd(config.models[stage], usage, tier)
                if price is None:
                    unpriced.add(config.models[stage])
                total += price or 0
            usd[tier + ("_cached" if cached else "")] = total
    return usd, unpriced
