"""What a run would cost before any call: prompt tokens counted from the input as the prompts
will be written, the expected output per request, and the provider's cache where the layout
lets questions share a filing segment's prefix. One figure per tier, with and without the cache.

The pools are priced as chunks spread evenly over the filing, level by level as the strategy
goes; retries and fallbacks are not counted, and every document
query is priced as an LLM call (a cascade sends fewer).

A query is a benchmark row (a :class:`Query`), or a chunk query already prepared as the fleet
ranks it (a :class:`ChunkInput` with its question: a question-set pair over a corpus filing's
stored input, whose token counts are read, not counted again).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from pydantic import BaseModel

from prism import prompts
from prism.hybrid import within_budget
from prism.llm import CACHE_MIN_TOKENS, prefix_id
from prism.models import Query, RunConfig, Stage, Usage
from prism.pricing import PriceTable
from prism.segmenting import TokenCounter, plan_segments
from prism.strategies.chunks import MAX_LEVELS, ChunkInput, first_level, prepare

BLOCK_TOKENS = 128  # cached prefixes are read in steps of this many tokens


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


def estimate(
    queries: Iterable[Query | ChunkInput],
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
    stages: dict[Stage, StageEstimate] = {}
    seen: set[str] = set()  # prefixes already sent once: the provider serves them from its cache
    cacheable = config.prompt_layout == "question_last" and cache_keys

    def call(stage: Stage, question: str, texts: list[str], n: int, task: str, shared: bool = True) -> None:
        template = prompts.load(
            "documents" if task == "documents" else "chunks", _variant(config, task), config.prompt_layout
        )
        messages = template.messages(question, texts, min(n, len(texts)))
        prompt = counter.count("".join(m["content"] for m in messages)) + 4 * len(messages)
        s = stages.setdefault(stage, StageEstimate())
        s.calls += 1
        s.prompt_tokens += prompt
        s.completion_tokens += expected_output.get(stage, 0) + round(reasoning_share * prompt)
        key = prefix_id(texts)
        if cacheable and shared and prompt >= CACHE_MIN_TOKENS and key in seen:
            # Everything before the question is shared; read in whole blocks.
            tail = counter.count(messages[-1]["content"].rsplit("\n\nQuestion:", 1)[-1]) + 8
            s.cached_tokens += max(0, prompt - tail) // BLOCK_TOKENS * BLOCK_TOKENS
        seen.add(key)

    count = first_segments = 0
    for q in queries:
        count += 1
        if isinstance(q, Query) and q.task == "documents":
            if config.uses_llm("documents"):
                call("documents", q.question, list(q.candidates), config.top_n, "documents")
            continue
        if not config.uses_llm("chunks"):
            first_segments += 1  # a $0 ranker reads the filing in one segment
            continue
        if isinstance(q, ChunkInput):
            data = q
        else:
            data = prepare(
                q.question,
                q.candidates,
                counter,
                config.segment_tokens,
                config.prefilter_keep,
                config.dense,
                share=config.prefilter_share,
            )
        level = first_level(data.costs, config.top_n, config.segment_top_k, config.segment_tokens)
        first_segments += len(level.segments)
        for segment in level.segments:
            call("segments", data.question, [data.chunks[i] for i in segment], level.k, "chunks")
        if len(level.segments) == 1:
            continue
        # Which chunks win is not known before the calls: price pools of chunks spread evenly
        # over the filing, as many as win, level by level as the strategy goes, until the pool
        # fits one re-rank. Pools are per question: never shared.
        n = len(data.chunks)
        wins, depth = level.k * len(level.segments), 1
        while True:
            pool = sorted({j * n // wins for j in range(min(wins, n))})
            if sum(data.costs[i] for i in pool) <= config.segment_tokens or depth >= MAX_LEVELS:
                texts = [data.chunks[i] for i in within_budget(pool, data.costs, config.segment_tokens)]
                call("rerank", data.question, texts, config.top_n, "chunks", shared=False)
                break
            segments = plan_segments(pool, data.costs, config.segment_tokens)
            k = max(config.top_n, min(config.segment_top_k, len(pool) // (2 * len(segments))))
            for segment in segments:
                call("segments", data.question, [data.chunks[i] for i in segment], k, "chunks", shared=False)
            wins, depth = k * len(segments), depth + 1
    usd: dict[str, Decimal] = {}
    unpriced: set[str] = set()
    for tier in ("standard", "flex", "batch"):
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
    return Estimate(
        queries=count,
        layout=config.prompt_layout,
        segments=first_segments,
        stages=dict(sorted(stages.items())),
        usd={k: str(v) for k, v in usd.items()},
        unpriced_models=sorted(unpriced),
    )


def _variant(config: RunConfig, task: str):
    return config.doc_prompt if task == "documents" else config.chunk_prompt
