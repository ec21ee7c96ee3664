"""Provider prompt caching and the flex tier, end to end: questions over one filing through the
fleet share its cached prefix and pay the cached-input rate for it; flex refusals are retried
and never paid for. Real worker processes, Redis, SeaweedFS and the simulator over HTTP."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pytest

from prism.llm import Gateway, LlmError, recording
from prism.llm.endpoints import Endpoint, RequestOptions, RetryPolicy
from prism.llm.pricing import PriceTable
from tests.conftest import PAGES, fleet_env, load, prism_cli, read_run, s3_client

pytestmark = pytest.mark.integration
# gpt-5-mini per million tokens: input, cached input, output (the provider's price list).
INPUT, CACHED, OUTPUT = Decimal("0.25"), Decimal("0.025"), Decimal("2")
QUESTIONS = ("What was total revenue?", "How much cash did the company hold?", "What was operating income?")


def _filing() -> list[str]:
    """A filing of one segment: every question's prompt is one call, well over 1,024 tokens."""
    queries = [q for q in load(PAGES, limit=40) if 5 <= len(q.candidates) <= 12]
    return list(queries[0].candidates)


@pytest.mark.parametrize("tier", ["standard", "flex"])
def test_questions_over_one_filing_read_its_prefix_from_the_cache_and_pay_the_cached_rate(
    tier, tmp_path, redis_url, s3_server, bucket, fresh_simulator, start_worker
):
    """Under flex, the provider refuses the first two requests: they are retried, counted as
    throttled and never paid; the answers are paid at half the standard rates, cached or not."""
    pages = _filing()
    rows = [
        json.dumps({"id": f"q{i}", "task": "chunks", "question": q, "candidates": pages})
        for i, q in enumerate(QUESTIONS)
    ]
    client = s3_client(s3_server)
    client.put_object(Bucket=bucket, Key="in/night.jsonl.gz", Body=gzip.compress(("\n".join(rows) + "\n").encode()))
    env = fleet_env(
        redis_url,
        s3_server,
        fresh_simulator.url,
        PRISM_CHUNK_RANKER="llm",
        PRISM_CACHE="false",
        PRISM_SERVICE_TIER=tier,
        PRISM_LLM_BACKOFF_CAP_S="0.5",
        PRISM_CHECK_SYSTEM_PROMPT="false",  # the provider's first requests are scripted: the questions'
    )
    refused = 2 if tier == "flex" else 0
    fresh_simulator.script(*["flex_unavailable"] * refused)
    before = fresh_simulator.stats.copy()
    start_worker(env)
    start_worker(env)  # two processes, two slots each: the three questions would all go at once
    done = prism_cli(
        ["run", f"s3://{bucket}/in/night.jsonl.gz", "--results", f"s3://{bucket}/prism", "--run-id", "night"],
        env,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = read_run(s3_server, bucket, "night")
    assert run["manifest"]["config"]["prompt_layout"] == "question_last"
    calls = [c for r in run["results"] for c in r["calls"]]
    assert len(calls) == 3 and all(c["error"] is None for c in calls), (run["manifest"]["counts"], run["failures"])
    assert all(c["tier"] == tier for c in calls)
    assert sum(c["throttled"] for c in calls) == refused == sum(c["attempts"] - 1 for c in calls)
    served = fresh_simulator.stats - before
    assert served["flex_unavailable"] == refused and served["ok"] == 3
    cached = sorted(c["usage"]["cached_tokens"] for c in calls)
    # The first request warmed the cache before the others went; they read all but the tail.
    assert cached[0] == 0 and all(0 < n and n % 128 == 0 for n in cached[1:])
    factor = Decimal("0.5") if tier == "flex" else Decimal(1)
    for c in calls:
        u = c["usage"]
        expected = ((u["prompt_tokens"] - u["cached_tokens"]) * INPUT + u["cached_tokens"] * CACHED) / 10**6 * factor
        completion = u["completion_tokens"] * OUTPUT / 10**6 * factor
        assert Decimal(c["input_usd"]) == expected
        assert Decimal(c["usd"]) == expected + completion
        assert Decimal(c["cache_saved_usd"]) == u["cached_tokens"] * (INPUT - CACHED) / 10**6 * factor
        list_price = (u["prompt_tokens"] * INPUT + u["completion_tokens"] * OUTPUT) / 10**6  # standard, uncached
        assert Decimal(c["tier_saved_usd"]) == list_price * (1 - factor)
    total, levers = run["cost"]["total"], run["cost"]["savings_by_lever"]
    assert total["cached_tokens"] == sum(cached) and Decimal(total["usd"]) == sum(Decimal(c["usd"]) for c in calls)
    assert total["throttled"] == refused
    assert Decimal(levers["provider_cache_usd"]) == sum(Decimal(c["cache_saved_usd"]) for c in calls)
    assert Decimal(levers["service_tier_usd"]) == sum(Decimal(c["tier_saved_usd"]) for c in calls)


MESSAGES = [
    {"role": "user", "content": "Question: Q?\n\nFiling types:\n[Document Index 0] DEF14A\n\n[Document Index 1] 10-K"}
]


def _flex(sim, attempts: int = 6) -> Gateway:
    policy = RetryPolicy(max_attempts=attempts, backoff_base_s=0.05, backoff_cap_s=0.5, timeout_s=5.0)
    return Gateway(
        Endpoint(base_url=sim.url, api_key="sk-test"), PriceTable.load(), policy, options=RequestOptions("flex")
    )


def test_flex_refusals_are_retried_and_only_the_answer_is_paid_at_half_price(fresh_simulator):
    fresh_simulator.script("flex_unavailable", "flex_unavailable")
    with recording() as calls:
        _flex(fresh_simulator).complete(MESSAGES, stage="documents", model="gpt-5-mini")
    (call,) = calls
    assert call.attempts == 3 and call.throttled == 2 and call.error is None and call.tier == "flex"
    u = call.usage
    standard = (u.prompt_tokens * INPUT + u.completion_tokens * OUTPUT) / 10**6
    assert call.usd == standard / 2 and call.tier_saved_usd == standard / 2
    assert fresh_simulator.requests[-1]["outcome"] == "ok"


def test_flex_refused_to_the_end_costs_nothing(fresh_simulator):
    fresh_simulator.script(*["flex_unavailable"] * 3)
    with recording() as calls, pytest.raises(LlmError):
        _flex(fresh_simulator, attempts=3).complete(MESSAGES, stage="documents", model="gpt-5-mini")
    (call,) = calls
    assert call.attempts == 3 and call.usd == 0 and "resource_unavailable" in (call.error or "")


def test_the_oracle_ranks_a_question_the_same_in_either_prompt_layout(fresh_simulator):
    """A layout A/B measures the layout alone: the oracle's noise is drawn from the question and
    its candidates, not from where the prompt puts them."""
    from prism.models import RunConfig
    from prism.ranking.rankers import build_ranker
    from prism.testing.simulator import SimulatorConfig

    fresh_simulator.config = SimulatorConfig(mode="oracle", noise=0.5)
    gateway = Gateway(Endpoint(base_url=fresh_simulator.url, api_key="sk-x"), PriceTable.load(), RetryPolicy())
    # Three of the simulator's questions, each over its evidence pages and 20 others.
    asked = [
        (q.question, [q.candidates[i] for i in sorted(set(q.qrel) | set(range(20)))]) for q in load(PAGES, limit=3)
    ]
    by_layout = {}
    for layout in ("question_first", "question_last"):
        ranker = build_ranker(RunConfig(chunk_ranker="llm", prompt_layout=layout), "segments", gateway)
        by_layout[layout] = [ranker.rank(question, pages, 10).indices for question, pages in asked]
    assert by_layout["question_first"] == by_layout["question_last"]
    fresh_simulator.config = SimulatorConfig(mode="oracle")
    noiseless = [ranker.rank(question, pages, 10).indices for question, pages in asked]
    assert noiseless != by_layout["question_last"]  # the noise was on, and drawn the same both times
