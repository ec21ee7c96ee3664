"""Segmented ranking with rankers whose answers we know, so every level can be checked."""

import pytest

from prism.models import Ranking
from prism.ranking.lexical import LexicalRanker
from prism.ranking.strategies.chunks import AllSegmentsFailed, ChunkInput, prepare, rank_chunks
from prism.segmenting import MARKER_TOKENS, TokenCounter


class GradeRanker:
    """Ranks by a known grade hidden in each chunk's text ("g3 ..."), and logs what it saw."""

    name = "llm"

    def __init__(self, fail_when=lambda cands: False):
        self.seen: list[list[str]] = []
        self.fail_when = fail_when

    def rank(self, question, candidates, top_k):
        self.seen.append(list(candidates))
        if self.fail_when(candidates):
            raise RuntimeError("provider down")
        order = sorted(range(len(candidates)), key=lambda i: (-int(candidates[i].split()[0][1:]), i))
        return Ranking(indices=order[:top_k])


def chunk_input(grades, cost=100):
    return ChunkInput(
        question="q", chunks=[f"g{g} chunk {i}" for i, g in enumerate(grades)], costs=[cost] * len(grades)
    )


def test_one_segment_is_ranked_once_for_the_final_top_n():
    ranker = GradeRanker()
    ranking, outcomes = rank_chunks(ranker, ranker, chunk_input([0, 2, 0, 1]), top_n=2, k=10, budget=1000)
    assert ranking.indices == [1, 3] and len(ranker.seen) == 1 and len(outcomes) == 1


def test_segments_then_pool_rerank_find_the_best_chunks():
    grades = [0] * 60
    for i, g in {5: 3, 17: 5, 33: 4, 48: 2, 59: 1}.items():
        grades[i] = g
    ranker = GradeRanker()
    ranking, outcomes = rank_chunks(ranker, ranker, chunk_input(grades), top_n=5, k=4, budget=2000)
    assert ranking.indices == [17, 33, 5, 48, 59]
    assert [o.level for o in outcomes] == [0, 0, 0, 1]  # 3 segments of 20, then the pool of 12
    assert len(ranker.seen[-1]) == 12 and ranking.flags == []


def test_a_pool_over_budget_is_reduced_by_another_level():
    grades = [i % 7 for i in range(200)]
    ranker = GradeRanker()
    ranking, outcomes = rank_chunks(ranker, ranker, chunk_input(grades), top_n=5, k=10, budget=1500)
    levels = sorted({o.level for o in outcomes})
    assert levels[-1] >= 2  # 14 segments -> a pool of 140 chunks (14,000 tokens) -> cut again
    assert all(len(seen) * 100 <= 1500 for seen in ranker.seen)
    assert all(int(ranking_text.split()[0][1:]) == 6 for ranking_text in (f"g{grades[i]}" for i in ranking.indices))


def test_a_failed_segment_degrades_the_query_and_all_failed_raises():
    grades = [0] * 40
    grades[3], grades[30] = 2, 1
    ranker = GradeRanker(fail_when=lambda cands: "g2 chunk 3" in cands)
    ranking, outcomes = rank_chunks(ranker, ranker, chunk_input(grades), top_n=2, k=5, budget=2000)
    assert "degraded" in ranking.flags and 30 in ranking.indices and 3 not in ranking.indices
    assert any("failed: RuntimeError: provider down" in n for n in ranking.notes)
    always = GradeRanker(fail_when=lambda cands: True)
    with pytest.raises(AllSegmentsFailed):
        rank_chunks(always, always, chunk_input(grades), top_n=2, k=5, budget=2000)


def test_a_failed_pool_rerank_keeps_the_segments_order():
    grades = [0] * 40
    grades[3], grades[30] = 2, 1
    segments = GradeRanker()
    pool = GradeRanker(fail_when=lambda cands: True)
    ranking, _ = rank_chunks(segments, pool, chunk_input(grades), top_n=2, k=5, budget=2000)
    assert ranking.indices == [3, 30] and "degraded" in ranking.flags


def test_a_chunk_over_budget_is_truncated_and_flagged():
    counter = TokenCounter()
    data = prepare("q", ["g1 short", "g0 " + "filler words " * 3000, "g2 short"], counter, 1000)
    assert data.truncated == [1] and data.costs[1] == 250
    assert counter.count(data.chunks[1]) <= 250
    ranker = GradeRanker()
    ranking, _ = rank_chunks(ranker, ranker, data, top_n=2, k=5, budget=1000)
    assert "truncated" in ranking.flags and ranking.indices == [2, 0]


def test_a_truncated_chunk_is_still_ranked():
    data = prepare(
        "widget revenue",
        ["cats and dogs", "widget revenue grew " + "filler words " * 3000, "weather today", "more cats"],
        TokenCounter(),
        1000,
    )
    ranking, _ = rank_chunks(LexicalRanker(), LexicalRanker(), data, top_n=3, k=5, budget=1000)
    assert data.truncated == [1] and ranking.indices[0] == 1 and "truncated" in ranking.flags


class SmallContextRanker(GradeRanker):
    """Refuses prompts of more than ``limit`` chunks, as a model with a small context does."""

    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    def rank(self, question, candidates, top_k):
        from prism.llm import ContextTooLong
        from prism.models import CallRecord

        if len(candidates) > self.limit:
            raise ContextTooLong("too long", CallRecord(stage="segments", model="m", latency_s=0, attempts=1, usd=None))
        return super().rank(question, candidates, top_k)


def test_a_context_overflow_splits_the_segment_instead_of_failing():
    grades = [0] * 40
    grades[7], grades[33] = 2, 1
    ranker = SmallContextRanker(limit=12)
    ranking, outcomes = rank_chunks(ranker, GradeRanker(), chunk_input(grades), top_n=2, k=3, budget=2000)
    assert ranking.indices == [7, 33] and "degraded" not in ranking.flags
    assert all(len(seen) <= 12 for seen in ranker.seen)
    assert any("over the model context" in n for n in ranking.notes)


def test_rate_limits_and_budgets_are_not_segment_failures():
    from prism.llm import BudgetExhausted

    class Broke(GradeRanker):
        def rank(self, question, candidates, top_k):
            raise BudgetExhausted("cap reached")

    with pytest.raises(BudgetExhausted):
        rank_chunks(Broke(), Broke(), chunk_input([0] * 40), top_n=2, k=3, budget=2000)


def test_a_pre_filter_by_share_keeps_chunks_and_their_counts_in_filing_order():
    chunks = ["widget revenue grew", "cats and dogs " * 50, "weather today", "widget revenue fell " * 5, "more cats"]
    counter = TokenCounter()
    data = prepare("widget revenue", chunks, counter, 1000, share=0.3)
    assert data.origin is not None and data.origin == sorted(data.origin)
    assert 0 in data.origin and 1 not in data.origin  # the long off-topic chunk alone is over the share
    assert data.chunks == [chunks[i] for i in data.origin]
    assert data.costs == [counter.count(chunks[i]) + MARKER_TOKENS for i in data.origin]
    given = prepare("widget revenue", chunks, counter, 1000, share=0.3, counts=[7] * 5)
    assert given.costs == [7 + MARKER_TOKENS] * len(given.origin)


def test_a_free_ranker_reads_the_whole_filing_in_one_segment_and_an_llm_by_its_budget():
    from prism.models import RunConfig
    from prism.ranking.strategies.chunks import first_level

    data = chunk_input([1] * 50, cost=1000)  # 50,000 tokens
    free, llm = RunConfig(chunk_ranker="financial"), RunConfig(chunk_ranker="llm", segment_tokens=10_000)
    assert free.segment_budget is None and llm.segment_budget == 10_000
    whole = first_level(data.costs, top_n=5, k=10, budget=free.segment_budget)
    assert whole.segments == [list(range(50))] and whole.k == 5
    cut = first_level(data.costs, top_n=5, k=10, budget=llm.segment_budget)
    assert len(cut.segments) >= 5 and cut.k == 10
