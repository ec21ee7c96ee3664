"""The cost estimate before any call: questions over one filing share its segments' prefix only
with the question after the chunks; flex is half; pools are never shared."""

from decimal import Decimal

from prism.llm.pricing import PriceTable
from prism.models import Query, RunConfig
from prism.runs.estimate import estimate

PAGES = [f"Page {i}. Revenue, cash, debt and margins of business line {i} over the year. " * 40 for i in range(30)]


def _queries(n: int) -> list[Query]:
    return [Query(id=f"q{i}", task="chunks", question=f"What is fact {i}?", candidates=PAGES) for i in range(n)]


def _config(layout: str) -> RunConfig:
    return RunConfig(chunk_ranker="llm", doc_ranker="lexical", prompt_layout=layout, segment_tokens=8000)


def test_only_question_last_shares_the_segments_and_flex_halves_the_price():
    outputs = {"segments": 500, "rerank": 500}
    last = estimate(_queries(4), _config("question_last"), PriceTable.load(), outputs)
    first = estimate(_queries(4), _config("question_first"), PriceTable.load(), outputs)
    segments, rerank = last.stages["segments"], last.stages["rerank"]
    assert segments.calls > 4 and rerank.calls == 4
    assert rerank.cached_tokens == 0 and first.stages["segments"].cached_tokens == 0
    # The first question's segments are sent cold, the three others read them from the cache;
    # the pools ranked on the way (also segment calls) are each question's own.
    one = estimate(_queries(1), _config("question_last"), PriceTable.load(), outputs).stages["segments"]
    assert segments.calls == 4 * one.calls and one.cached_tokens == 0
    assert 0 < segments.cached_tokens < 3 / 4 * segments.prompt_tokens and segments.cached_tokens % 128 == 0
    for e in (last, first):
        assert Decimal(e.usd["flex"]) == Decimal(e.usd["standard"]) / 2
    assert Decimal(last.usd["standard_cached"]) < Decimal(last.usd["standard"])
    assert first.usd["standard_cached"] == first.usd["standard"]
    # Without a cache key the provider would not be asked to keep the prefix together.
    keyless = estimate(_queries(4), _config("question_last"), PriceTable.load(), outputs, cache_keys=False)
    assert keyless.stages["segments"].cached_tokens == 0


def test_reasoning_grows_with_the_prompt_and_batch_halves_the_price():
    outputs = {"segments": 40, "rerank": 40}
    plain = estimate(_queries(2), _config("question_last"), PriceTable.load(), outputs)
    thinking = estimate(_queries(2), _config("question_last"), PriceTable.load(), outputs, reasoning_share=0.18)
    for stage, s in thinking.stages.items():
        base = plain.stages[stage]
        assert s.prompt_tokens == base.prompt_tokens and base.completion_tokens == 40 * base.calls
        # Rounded per call: within one token a call of 18% of its prompt.
        assert abs(s.completion_tokens - base.completion_tokens - 0.18 * s.prompt_tokens) <= s.calls
    assert Decimal(thinking.usd["standard"]) > Decimal(plain.usd["standard"])
    assert Decimal(thinking.usd["batch"]) == Decimal(thinking.usd["standard"]) / 2
