"""The LLM gateway and the LLM ranker against the provider simulator, over real HTTP."""

import pytest

from prism.llm import Gateway, LlmError, recording
from prism.llm.endpoints import Endpoint, ModelLimits, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import FILING_TYPES, RunConfig
from prism.ranking.rankers import build_ranker
from tests.conftest import DOC_DEV, load
from workers.limiter import FleetLimiter

pytestmark = pytest.mark.integration
MESSAGES = [
    {
        "role": "user",
        "content": "Question: Q?\n\nFiling types:\n[Document Index 0] DEF14A\n\n[Document Index 1] 10-K\n\nReturn exactly 2 indices.",
    }
]


def gateway(sim, **policy) -> Gateway:
    policy = {"backoff_base_s": 0.05, "backoff_cap_s": 2.0, "timeout_s": 5.0} | policy
    return Gateway(Endpoint(base_url=sim.url, api_key="sk-test"), PriceTable.load(), RetryPolicy(**policy))


def test_usage_latency_and_price_are_recorded(fresh_simulator):
    with recording() as calls:
        reply = gateway(fresh_simulator).complete(MESSAGES, stage="documents", model="gpt-5-mini")
    assert reply.text in ("[0, 1]", "[1, 0]")
    (call,) = calls
    assert (
        call.attempts == 1 and call.error is None and call.usage.prompt_tokens > 20 and call.usage.completion_tokens > 0
    )
    assert call.usd == PriceTable.load().usd("gpt-5-mini", call.usage) and call.usd > 0


def test_the_sdk_client_is_made_before_the_rate_limit_is_taken(fresh_simulator):
    """A client made after the fleet's take (an SSL context, more under load) sends the request
    later than the fleet counted it, and at its window's end the provider refuses what the fleet
    admitted: a process's first chat and embedding requests find their client made."""
    client_made: list[bool] = []

    class Watching(FleetLimiter):
        gateway: Gateway

        def acquire(self, endpoint, model, tokens, prompt_key=None):
            client_made.append(bool(self.gateway._clients))
            return super().acquire(endpoint, model, tokens, prompt_key)

    def fresh() -> Gateway:
        limiter = Watching(None, {"*": ModelLimits(requests="100/minute")})
        endpoint = Endpoint(base_url=fresh_simulator.url, api_key="sk-test")
        limiter.gateway = Gateway(endpoint, PriceTable.load(), RetryPolicy(timeout_s=5.0), limiter=limiter)
        return limiter.gateway

    fresh().complete(MESSAGES, stage="documents", model="gpt-5-mini")
    fresh().embed(["revenue grew"], model="text-embedding-3-small")
    assert client_made == [True, True]


def test_429_waits_for_retry_after_then_succeeds(fresh_simulator):
    fresh_simulator.config.retry_after_s = 0.6
    fresh_simulator.script("429", "429")
    with recording() as calls:
        gateway(fresh_simulator).complete(MESSAGES, stage="documents", model="gpt-5-mini")
    assert calls[0].attempts == 3
    assert calls[0].latency_s >= 1.2  # two waits of at least the 0.6 s asked for


def test_5xx_and_timeouts_are_retried(fresh_simulator):
    fresh_simulator.config.hang_s = 3
    fresh_simulator.script("500", "503", "timeout")
    with recording() as calls:
        gateway(fresh_simulator, timeout_s=0.5).complete(MESSAGES, stage="documents", model="gpt-5-mini")
    assert calls[0].attempts == 4 and calls[0].error is None


@pytest.mark.parametrize(
    "fault, status", [("insufficient_quota", "429 insufficient_quota"), ("401", "401"), ("400", "400")]
)
def test_quota_auth_and_bad_requests_fail_fast(fresh_simulator, fault, status):
    fresh_simulator.script(fault)
    with recording() as calls, pytest.raises(LlmError) as err:
        gateway(fresh_simulator).complete(MESSAGES, stage="documents", model="gpt-5-mini")
    assert calls[0].attempts == 1 and f"HTTP {status}" in calls[0].error
    assert calls[0].usd == 0  # refused: nothing was generated or billed
    assert "after 1 attempt" in str(err.value)


def test_retries_run_out_and_the_failed_call_is_still_recorded(fresh_simulator):
    fresh_simulator.script("503", "503", "503")
    with recording() as calls, pytest.raises(LlmError):
        gateway(fresh_simulator, max_attempts=3).complete(MESSAGES, stage="segments", model="gpt-5-mini")
    assert calls[0].attempts == 3 and calls[0].stage == "segments"


def test_unpriced_model_and_missing_usage_are_unpriced_not_free(fresh_simulator):
    gw = gateway(fresh_simulator)
    fresh_simulator.script("no_usage")
    with recording() as calls:
        gw.complete(MESSAGES, stage="documents", model="gpt-5-mini")  # usage not reported
        gw.complete(MESSAGES, stage="documents", model="acme-ranker-9000")  # no price known
    assert calls[0].usd is None and calls[1].usd is None and calls[1].usage.prompt_tokens > 0
    with recording() as calls:
        gw.complete(MESSAGES, stage="documents", model="gpt-5-mini")
    assert calls[0].usd > 0


def test_llm_ranker_retries_an_unreadable_reply_then_falls_back(fresh_simulator):
    q = load(DOC_DEV, limit=1)[0]
    ranker = build_ranker(RunConfig(doc_ranker="llm"), "documents", gateway(fresh_simulator))
    fresh_simulator.script("malformed")
    with recording() as calls:
        ranking = ranker.rank(q.question, q.candidates, 5)
    assert ranking.flags == ["retried"] and len(calls) == 2 and sorted(ranking.indices) == [0, 1, 2, 3, 4]
    assert ranking.indices[0] == 4  # the oracle's answer: Earnings is the one relevant type
    fresh_simulator.script("malformed", "malformed")
    with recording() as calls:
        ranking = ranker.rank(q.question, q.candidates, 5)
    assert ranking.flags == ["fallback"] and len(calls) == 2 and sorted(ranking.indices) == [0, 1, 2, 3, 4]
    assert "unusable twice" in ranking.notes[0]


def test_llm_ranker_answers_with_the_oracle_order(fresh_simulator):
    ranker = build_ranker(RunConfig(doc_ranker="llm"), "documents", gateway(fresh_simulator))
    for q in load(DOC_DEV, limit=10):
        ranking = ranker.rank(q.question, q.candidates, 5)
        grades = [q.qrel[i] for i in ranking.indices]
        assert grades == sorted(grades, reverse=True) and not ranking.flags
        assert [FILING_TYPES[i] for i in ranking.indices] != []


def test_the_cascade_sends_exactly_the_unsure_queries_to_the_llm(fresh_simulator):
    from workers.priors import PACKAGED, read_prior
    from workers.settings import Settings

    prior = read_prior(PACKAGED, Settings())
    rows = load(DOC_DEV, limit=80)
    confidence = prior.confidence(prior.predict([q.question for q in rows]))
    unsure = {q.id for q, c in zip(rows, confidence) if c < prior.threshold}
    assert 0 < len(unsure) < len(rows)
    cascade = build_ranker(RunConfig(doc_ranker="cascade"), "documents", gateway(fresh_simulator), prior)
    asked = set()
    for q in rows:
        with recording() as calls:
            ranking = cascade.rank(q.question, q.candidates, 5)
        assert ranking.answered_by == ("llm" if calls else "prior")
        if calls:
            asked.add(q.id)
    assert asked == unsure


def test_fuse_combines_the_prior_and_the_llm(fresh_simulator):
    from workers.priors import PACKAGED, read_prior
    from workers.settings import Settings

    prior = read_prior(PACKAGED, Settings())
    fuse = build_ranker(
        RunConfig(doc_ranker="fuse", fuse_weights=(0.0, 1.0)), "documents", gateway(fresh_simulator), prior
    )
    llm_only = build_ranker(RunConfig(doc_ranker="llm"), "documents", gateway(fresh_simulator))
    for q in load(DOC_DEV, limit=10):
        with recording() as calls:
            fused = fuse.rank(q.question, q.candidates, 5)
        assert len(calls) == 1 and fused.answered_by == "fuse"
        assert fused.indices == llm_only.rank(q.question, q.candidates, 5).indices  # all weight on the LLM
