"""The gateway and the rankers against servers that behave like real ones do (the simulator's
server modes, over HTTP): one that reads only ``max_tokens``, a model that runs away, a slow
server, a chat format that drops the system prompt, and a model with no price."""

import gzip
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prism.llm import QUOTED_REPLY_TOKENS, ContextTooLong, Gateway, LlmError, recording
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import CallRecord, JobResult, Ranking, RunConfig
from prism.ranking.rankers import build_ranker
from prism.ranking.strategies.chunks import prepare, rank_chunks
from prism.runs.outcomes import CostSummary, cost_report
from prism.segmenting import TokenCounter
from producer.prompt_check import check_prompts
from producer.report import markdown
from tests.conftest import DOC_DEV, PAGES, load
from workers.runstate import RunState
from workers.store import LocalStore
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.integration
MESSAGES = [
    {
        "role": "user",
        "content": "Question: Q?\n\n[Document Index 0] DEF14A\n\n[Document Index 1] 10-K\n\nReturn exactly 2 indices.",
    }
]


def gateway(sim, cap_param="auto", **policy) -> Gateway:
    policy = {"backoff_base_s": 0.05, "backoff_cap_s": 0.5, "timeout_s": 5.0} | policy
    endpoint = Endpoint(base_url=sim.url, api_key="sk-test", output_cap_param=cap_param)
    return Gateway(endpoint, PriceTable.load(), RetryPolicy(**policy))


@pytest.mark.parametrize(
    "cap_param, sent", [("auto", {"max_tokens"}), ("both", {"max_tokens", "max_completion_tokens"})]
)
def test_a_server_that_reads_only_max_tokens_is_capped(fresh_simulator, cap_param, sent):
    fresh_simulator.config.reads_cap = ("max_tokens",)
    fresh_simulator.config.runaway = True
    cut = fresh_simulator.stats["completions_length"]
    with recording() as calls:
        gateway(fresh_simulator, cap_param).complete(MESSAGES, stage="documents", model="local", max_output_tokens=40)
    assert calls[0].usage.completion_tokens == 40
    assert set(fresh_simulator.requests[-1]["caps"]) == sent
    assert fresh_simulator.stats["completions_length"] == cut + 1


def test_the_openai_field_alone_is_ignored_by_such_a_server(fresh_simulator):
    """What happened before: max_completion_tokens only, and the model generated its whole budget."""
    fresh_simulator.config.reads_cap = ("max_tokens",)
    fresh_simulator.config.runaway = True
    fresh_simulator.config.runaway_tokens = 3000
    gw = gateway(fresh_simulator, "max_completion_tokens")
    with recording() as calls:
        gw.complete(MESSAGES, stage="documents", model="local", max_output_tokens=40)
    assert fresh_simulator.requests[-1]["caps"] == {"max_completion_tokens": 40}
    assert calls[0].usage.completion_tokens == 3000


def test_default_caps_reach_the_server_from_the_ranker(fresh_simulator):
    q = load(DOC_DEV, limit=1)[0]
    config = RunConfig(doc_ranker="llm", models=RunConfig().models | {"documents": "local-base"})
    build_ranker(config, "documents", gateway(fresh_simulator)).rank(q.question, q.candidates, 5)
    assert fresh_simulator.requests[-1]["caps"] == {"max_tokens": config.output_cap("documents")}
    assert config.output_cap("documents") < 1000


def test_a_runaway_reply_is_quoted_short_in_the_retry_and_the_query_falls_back(fresh_simulator):
    """A base model that ignores the contract: no cap, it fills the context; the retry still fits."""
    q = load(DOC_DEV, limit=1)[0]
    fresh_simulator.config.runaway = True
    fresh_simulator.config.context_tokens = 4000
    config = RunConfig(doc_ranker="llm", max_output_tokens={"documents": 0})  # 0: no cap, the worst case
    ranker = build_ranker(config, "documents", gateway(fresh_simulator))
    with recording() as calls:
        ranking = ranker.rank(q.question, q.candidates, 5)
    assert ranking.flags == ["fallback"] and sorted(ranking.indices) == [0, 1, 2, 3, 4]
    assert len(calls) == 2 and all(c.error is None for c in calls)
    assert calls[0].usage.completion_tokens == 4000 - calls[0].usage.prompt_tokens  # ran up to the context
    assert fresh_simulator.stats["context_length"] == 0
    quoted = fresh_simulator.requests[-1]["assistant"]
    assert quoted.endswith("[...]") and TokenCounter().count(quoted) <= QUOTED_REPLY_TOKENS + 5


def test_a_retry_over_the_context_falls_back_instead_of_failing(fresh_simulator):
    q = load(DOC_DEV, limit=1)[0]
    ranker = build_ranker(RunConfig(doc_ranker="llm"), "documents", gateway(fresh_simulator))
    fresh_simulator.script("runaway", "context_length")
    with recording() as calls:
        ranking = ranker.rank(q.question, q.candidates, 5)
    assert ranking.flags == ["fallback"] and "over the model context" in ranking.notes[0]
    assert len(calls) == 2 and "context_length_exceeded" in calls[1].error


@pytest.mark.parametrize("shape", ["openai", "llama.cpp"])
def test_a_context_overflow_is_read_as_such_in_each_servers_words(fresh_simulator, shape):
    fresh_simulator.config.context_tokens, fresh_simulator.config.overflow_error = 20, shape
    with pytest.raises(ContextTooLong):
        gateway(fresh_simulator).complete(MESSAGES, stage="documents", model="local")


def test_a_lone_chunk_over_the_context_is_cut_and_ranked(fresh_simulator):
    counter = TokenCounter()
    words = "revenue margin guidance liquidity segment outlook dividend capital ".split()
    chunks = [" ".join(words[(i + j) % len(words)] for j in range(2400)) for i in range(3)]
    data = prepare("What was the revenue guidance?", chunks, counter, budget=32_000)
    fresh_simulator.config.mode = "lexical"
    fresh_simulator.config.context_tokens = 2000  # under one chunk and its prompt
    ranker = build_ranker(RunConfig(chunk_ranker="llm"), "segments", gateway(fresh_simulator))
    with recording() as calls:
        ranking, outcomes = rank_chunks(ranker, ranker, data, 5, 10, 32_000)
    assert sorted(ranking.indices) == [0, 1, 2]
    assert "truncated" in ranking.flags and "degraded" not in ranking.flags
    assert not any(o.error for o in outcomes)
    assert sum("over the model context: ranked its first" in n for n in ranking.notes) == 3
    assert any(c.error is None for c in calls) and any(c.error and "context_length" in c.error for c in calls)


def test_a_timed_out_request_is_sent_again_once_not_six_times(fresh_simulator):
    fresh_simulator.config.hang_s = 2
    fresh_simulator.script("timeout", "timeout", "timeout")
    before = fresh_simulator.stats["requests"]
    with recording() as calls, pytest.raises(LlmError):
        gateway(fresh_simulator, timeout_s=0.3, max_attempts=6).complete(
            MESSAGES, stage="documents", model="gpt-5-mini"
        )
    assert calls[0].attempts == 2 and calls[0].timeouts == 2
    assert fresh_simulator.stats["requests"] - before == 2
    assert calls[0].usd is None  # the abandoned generations may have been billed
    # what the two abandoned attempts sent is kept, beside the usage no one reported
    assert calls[0].timed_out_prompt_tokens > 0 and calls[0].timed_out_prompt_tokens % 2 == 0


def test_timeouts_are_counted_apart_from_5xx(fresh_simulator):
    fresh_simulator.config.hang_s = 2
    fresh_simulator.script("500", "timeout", "503", "500")
    with recording() as calls:
        gateway(fresh_simulator, timeout_s=0.3, timeout_retries=1).complete(
            MESSAGES, stage="documents", model="gpt-5-mini"
        )
    assert calls[0].attempts == 5 and calls[0].timeouts == 1 and calls[0].error is None
    summary = CostSummary()
    summary.add(calls[0])
    assert not summary.usd_known and summary.unpriced_calls == 1 and summary.usd > 0
    assert 0 < summary.timed_out_prompt_tokens < summary.prompt_tokens * 2  # one timed-out attempt's prompt


def test_a_slow_runaway_generation_times_out_without_a_cap_and_answers_with_one(fresh_simulator):
    fresh_simulator.config.runaway = True
    fresh_simulator.config.runaway_tokens = 600
    fresh_simulator.config.tokens_per_s = 400  # 1.5 s for the whole budget
    gw = gateway(fresh_simulator, timeout_s=0.6)
    before = fresh_simulator.stats["requests"]
    with recording() as calls, pytest.raises(LlmError):
        gw.complete(MESSAGES, stage="documents", model="local")
    assert calls[0].timeouts == 2 and fresh_simulator.stats["requests"] - before == 2
    with recording() as calls:
        gw.complete(MESSAGES, stage="documents", model="local", max_output_tokens=50)
    assert calls[0].error is None and calls[0].usage.completion_tokens == 50 and calls[0].latency_s < 0.6


def test_a_dropped_system_prompt_is_flagged_on_the_call_and_in_the_report(fresh_simulator, tmp_path):
    q = load(DOC_DEV, limit=1)[0]
    ranker = build_ranker(RunConfig(doc_ranker="llm"), "documents", gateway(fresh_simulator))
    with recording() as calls:
        ranker.rank(q.question, q.candidates, 5)
    assert calls[0].prompt_token_gap is None  # the whole prompt was counted
    fresh_simulator.config.drops_system = True
    with recording() as calls:
        ranker.rank(q.question, q.candidates, 5)
    (call,) = calls
    assert call.prompt_token_gap is not None and call.prompt_token_gap > call.usage.prompt_tokens
    state = _state(tmp_path, {"q1": [call]})
    cost = cost_report(state)
    assert cost["total"]["prompt_token_gaps"] == 1 and cost["by_stage"]["documents"]["prompt_token_gaps"] == 1
    text = markdown(_manifest(), cost, {}, state)
    assert "## Prompt-token gaps (1 calls)" in text and f"{call.prompt_token_gap} fewer than sent" in text


def test_the_system_prompt_check_compares_the_servers_own_counts(fresh_simulator, tmp_path):
    config = RunConfig(doc_ranker="llm", chunk_ranker="llm")
    gw = gateway(fresh_simulator, max_attempts=1)
    store = LocalStore(tmp_path / "a")
    checks, calls = check_prompts(gw, config, "run-a", store)
    (check,) = checks  # one endpoint and one model for every stage
    assert check.dropped is False and check.stages == ["documents", "rerank", "segments"] and len(calls) == 2
    assert check.counted_with - check.counted_without >= 0.9 * check.system_tokens
    assert check_prompts(gw, config, "run-a2", store) == ([check], [])  # kept for a day: no call
    fresh_simulator.config.drops_system = True
    (check,), _ = check_prompts(gw, config, "run-b", LocalStore(tmp_path / "b"))
    assert check.dropped is True and check.counted_with == check.counted_without
    assert "DROPS THE SYSTEM PROMPT" in check.text()
    fresh_simulator.script("401")
    (check,), calls = check_prompts(gw, config, "run-c", LocalStore(tmp_path / "c"))
    assert check.dropped is None and "401" in (check.error or "") and calls[0].error is not None
    assert not list((tmp_path / "c").rglob("*.json"))  # a check not made is not kept


def test_an_unpriced_model_is_unknown_in_every_total_never_zero(fresh_simulator, tmp_path):
    gw = gateway(fresh_simulator)
    with recording() as unpriced:
        gw.complete(MESSAGES, stage="documents", model="local-gguf")
    with recording() as priced:
        gw.complete(MESSAGES, stage="segments", model="gpt-5-mini")
    fresh_simulator.config.hang_s = 2
    fresh_simulator.script("timeout", "timeout")
    with recording() as failed, pytest.raises(LlmError):
        gateway(fresh_simulator, timeout_s=0.3).complete(MESSAGES, stage="segments", model="gpt-5-mini")
    fresh_simulator.script("401")
    with recording() as refused, pytest.raises(LlmError):
        gw.complete(MESSAGES, stage="rerank", model="gpt-5-mini")
    assert unpriced[0].usd is None and priced[0].usd > 0 and failed[0].usd is None and refused[0].usd == 0
    state = _state(tmp_path, {"q1": unpriced + priced, "q2": failed + refused})
    cost = cost_report(state)
    total = cost["total"]
    assert total["usd_known"] is False and total["unpriced_calls"] == 2 and total["calls"] == 4
    assert total["usd"] == str(priced[0].usd)  # the priced calls' sum, as recorded per call
    assert cost["by_model"]["local-gguf"]["usd_known"] is False and cost["by_model"]["gpt-5-mini"]["usd_known"] is False
    assert cost["by_stage"]["rerank"]["usd_known"] is True and cost["by_stage"]["documents"]["usd_known"] is False
    jobs = {j["query_id"]: j for j in cost["jobs"]}
    assert jobs["q1"]["usd_known"] is False and jobs["q2"]["usd_known"] is False
    rows = [line for line in markdown(_manifest(), cost, {}, state).splitlines() if line.startswith("| ")]
    by_name = {row.split(" | ")[0][2:]: row for row in rows}
    assert "unknown (2 unpriced call(s); $" in by_name["total"]
    assert "unknown (1 unpriced call(s))" in by_name["by_model local-gguf"]
    assert "$0.0000" in by_name["by_stage rerank"]  # refused before any work: known to be free
    assert not any("| 0.0000 |" in row for row in rows)


def small_run(env: dict[str, str], cwd: Path, run_id: str, timeout: float = 600) -> tuple[dict, dict, str, float]:
    """`prism run` over 4 document rows and 1 chunk row: (manifest, cost.json, report.md, seconds)."""
    with gzip.open(PAGES, "rt") as f:
        page = next(f)
    rows = DOC_DEV.read_text().splitlines(keepends=True)[:4] + [page]
    (cwd / "small.jsonl").write_text("".join(rows))
    started = time.monotonic()
    run = prism_cli(["run", "small.jsonl", "--run-id", run_id], env, cwd, timeout)
    took = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    base = cwd / "results" / "runs" / run_id
    manifest, cost = (json.loads((base / name).read_text()) for name in ("manifest.json", "cost.json"))
    return manifest, cost, (base / "report.md").read_text(), took


def assert_ranked_by_llm_or_flagged_fallback(manifest: dict, cost: dict, cwd: Path, run_id: str) -> None:
    counts = manifest["counts"]
    assert (counts["done"], counts["failed"], counts["documents"], counts["chunks"]) == (5, 0, 4, 1)
    results = [json.loads(p.read_text()) for p in (cwd / "results" / "runs" / run_id / "results").rglob("*.json")]
    assert len(results) == 5
    for r in results:
        assert r["ranking"]["indices"] and "degraded" not in r["ranking"]["flags"]
    assert cost["total"]["usd_known"] is False and cost["total"]["unpriced_calls"] > 0


def test_a_run_against_a_base_model_on_a_llamacpp_like_server_ranks_every_query(fresh_simulator, tmp_path):
    """The server reads only max_tokens, the model runs away, generates slowly, and the chat
    format drops the system prompt; the model has no price."""
    cfg = fresh_simulator.config
    cfg.reads_cap, cfg.runaway, cfg.tokens_per_s, cfg.drops_system = ("max_tokens",), True, 4000, True
    cfg.context_tokens = 8192
    env = fleet_env(None, None, fresh_simulator.url, PRISM_LLM_MODEL="local-base", PRISM_LLM_TIMEOUT_S="3")
    manifest, cost, report, took = small_run(env, tmp_path, "llamacpp-like")
    assert_ranked_by_llm_or_flagged_fallback(manifest, cost, tmp_path, "llamacpp-like")
    assert took < 120 and cost["total"]["timeouts"] == 0
    documents = cost["by_stage"]["documents"]
    # 4 queries: runaway, retry, fallback; and the run's system-prompt check: with it (a gap), and without
    assert documents["prompt_token_gaps"] == documents["calls"] - 1 == 9
    (check,) = manifest["prompt_checks"]
    assert check["dropped"] is True and check["stages"] == ["documents", "rerank", "segments"]
    assert "DROPS THE SYSTEM PROMPT" in report.split("## Cost")[0]
    assert [j["calls"] for j in cost["jobs"] if j["query_id"] == "system-prompt-check"] == [2]
    assert "## Prompt-token gaps" in report and "unknown (" in report
    assert "fallback" in report


def _state(tmp_path, calls_by_query: dict[str, list[CallRecord]]) -> RunState:
    state = RunState(LocalStore(tmp_path), "run-test")
    now = datetime.now(UTC)
    for query_id, calls in calls_by_query.items():
        state.results[query_id] = JobResult(
            run_id="run-test",
            job_id=query_id,
            query_id=query_id,
            task="documents",
            ranker="llm",
            n_candidates=5,
            ranking=Ranking(indices=[0]),
            calls=calls,
            started_at=now,
            finished_at=now,
        )
    return state


def _manifest():
    from prism.models import RunManifest

    return RunManifest(
        run_id="run-test",
        status="complete",
        input="in.jsonl",
        results="results",
        created_at=datetime.now(UTC),
        config=RunConfig(),
        settings={},
        code_version="test",
        embedded=True,
    )
