"""Every variant of the method runs from configuration alone, through the same tasks, gateway
and result store (embedded workers here; bench/variants.py runs them on the fleet), against
the simulator over HTTP."""

import gzip
import json
import statistics

import pytest
from scipy import stats

from tests.conftest import DOC_DEV, PAGES, fleet_env, prism_cli

pytestmark = pytest.mark.integration


@pytest.fixture()
def mixed_input(tmp_path):
    with gzip.open(PAGES, "rt") as f:
        pages = [next(f) for _ in range(2)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(DOC_DEV.read_text().splitlines(keepends=True)[:3]) + "".join(pages))
    return path


def run_variant(tmp_path, sim, source, run_id, **env):
    done = prism_cli(
        ["run", str(source), "--run-id", run_id], fleet_env(None, None, sim.url, PRISM_CACHE="false", **env), tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    base = tmp_path / "results" / "runs" / run_id
    read = lambda name: json.loads((base / name).read_text())  # noqa: E731
    results = [json.loads(p.read_text()) for p in sorted((base / "results").rglob("*.json"))]
    return read("manifest.json"), read("metrics.json"), read("cost.json"), results


@pytest.mark.parametrize("variant", ["a1", "a2", "a3", "a4"])
def test_chunk_agent_variants(tmp_path, fresh_simulator, mixed_input, variant):
    manifest, metrics, cost, results = run_variant(
        tmp_path, fresh_simulator, mixed_input, variant, PRISM_CHUNK_RANKER=variant
    )
    assert manifest["counts"]["done"] == 5 and manifest["counts"]["failed"] == 0
    scorers = {"a1": 4, "a2": 4, "a3": 3, "a4": 2}[variant]
    for r in (r for r in results if r["task"] == "chunks"):
        segment_calls = [c for c in r["calls"] if c["stage"] == "segments"]
        assert len(segment_calls) >= scorers * r["segments"]  # every scorer read every segment
        assert not r["ranking"]["flags"]
    assert metrics["chunks"]["ndcg@5"] == 1.0  # the oracle's scores, combined, keep the order


def test_document_agents_and_the_hybrid_workflow(tmp_path, fresh_simulator, mixed_input):
    _, metrics, cost, results = run_variant(
        tmp_path, fresh_simulator, mixed_input, "hybrid-flow", PRISM_DOC_RANKER="agents", PRISM_CHUNK_RANKER="llm"
    )
    for r in (r for r in results if r["task"] == "documents"):
        assert len(r["calls"]) == 6  # the analyzer and five type experts
    assert metrics["documents"]["ndcg@5"] == 1.0
    assert sorted(fresh_simulator.stats)  # the simulator answered weights and scores
    systems = [r["system"] for r in fresh_simulator.requests if r["system"]]
    assert any("Reply format: weights-json" in s for s in systems) and any(
        "expert in 8-K filings" in s for s in systems
    )


def test_evidence_rounds_report_evidence_and_answers(tmp_path, fresh_simulator, mixed_input):
    manifest, metrics, cost, results = run_variant(
        tmp_path, fresh_simulator, mixed_input, "evidence", PRISM_CHUNK_RANKER="evidence", PRISM_PREFILTER_KEEP="60"
    )
    chunk_results = [r for r in results if r["task"] == "chunks"]
    for r in chunk_results:
        details = r["ranking"]["details"]
        assert details["sub_questions"] and details["rounds"] >= 1 and details["answer"]
        assert all(0 <= i < r["n_candidates"] for i in details["evidence"])
        assert {c["stage"] for c in r["calls"]} == {"evidence"}
    evidence = metrics["evidence"]
    assert evidence["queries"] == 2 and set(evidence) >= {"precision", "recall", "exact_match", "token_f1"}
    assert evidence["recall"] > 0 and evidence["exact_match"] > 0  # the oracle answers when the evidence holds its page


def test_in_context_examples_reach_the_prompt_and_never_the_query_itself(tmp_path, fresh_simulator, mixed_input):
    index = tmp_path / "icl"
    built = prism_cli(["icl", "build", str(DOC_DEV), "--out", str(index)], fleet_env(None, None, None), tmp_path)
    assert built.returncode == 0, built.stderr
    fresh_simulator.requests.clear()
    _, metrics, _, results = run_variant(
        tmp_path,
        fresh_simulator,
        mixed_input,
        "icl",
        PRISM_ICL_DOCUMENTS="5",
        PRISM_ICL_INDEX=str(index),
        PRISM_CHUNK_RANKER="lexical",
    )
    # question_last: a query's own examples follow the candidates, outside the shared prefix.
    asked = [r for r in fresh_simulator.requests if r["user"] and "Worked examples" in r["user"]]
    assert len(asked) == 3  # one per document query
    questions = [q.question for q in __import__("tests.conftest", fromlist=["load"]).load(DOC_DEV, limit=3)]
    for question in questions:  # the workers' order is not the input's: match prompts by question
        # its own question comes before the examples, which may hold the other queries' questions
        (request,) = [r for r in asked if question in r["user"].split("Worked examples", 1)[0]]
        assert "Worked examples" not in (request["system"] or "")
        examples = request["user"].split("Worked examples", 1)[1]
        assert examples.count("\n- ") == 5 and question not in examples  # the index holds this very row


def test_hybrid_ranker_and_prefilter_are_configuration_only(tmp_path, fresh_simulator, mixed_input):
    manifest, metrics, cost, results = run_variant(
        tmp_path,
        fresh_simulator,
        mixed_input,
        "hybrid",
        PRISM_DOC_RANKER="prior",
        PRISM_CHUNK_RANKER="hybrid",
        PRISM_DENSE="lsa",
    )
    assert cost["total"]["calls"] == 0 and manifest["config"]["dense"] == "lsa"
    _, _, filtered, results = run_variant(
        tmp_path, fresh_simulator, mixed_input, "prefilter", PRISM_PREFILTER_KEEP="25"
    )
    _, _, full, _ = run_variant(tmp_path, fresh_simulator, mixed_input, "full")
    assert filtered["by_task"]["chunks"]["prompt_tokens"] < 0.5 * full["by_task"]["chunks"]["prompt_tokens"]
    for r in (r for r in results if r["task"] == "chunks"):
        assert r["n_candidates"] > 25 and all(0 <= i < r["n_candidates"] for i in r["ranking"]["indices"])
    by_share, _, shared, _ = run_variant(tmp_path, fresh_simulator, mixed_input, "share", PRISM_PREFILTER_SHARE="0.3")
    assert by_share["config"]["prefilter_share"] == 0.3 and by_share["counts"]["failed"] == 0
    # The kept chunks fit in 30% of each filing's tokens; the prompts add the instructions and the question.
    assert shared["by_task"]["chunks"]["prompt_tokens"] < 0.4 * full["by_task"]["chunks"]["prompt_tokens"]


def test_prefilter_on_an_api_embedder_is_accounted(tmp_path, fresh_simulator, mixed_input):
    api_dense = {"PRISM_PREFILTER_KEEP": "25", "PRISM_DENSE": "text-embedding-3-small"}
    before = fresh_simulator.stats["embedding_requests"]
    _, _, cost, results = run_variant(tmp_path, fresh_simulator, mixed_input, "api-dense", **api_dense)
    served = fresh_simulator.stats["embedding_requests"] - before
    embeddings = cost["by_stage"]["embeddings"]
    assert served >= 2 and embeddings["calls"] == served  # pages and questions embedded, every request counted
    assert embeddings["prompt_tokens"] > 0 and embeddings["unpriced_calls"] == 0 and float(embeddings["usd"]) > 0
    assert cost["by_task"]["chunks"]["calls"] == cost["by_stage"]["embeddings"]["calls"] + sum(
        len(r["calls"]) for r in results if r["task"] == "chunks"
    )
    # Each filing's page vectors are kept in the results store: a later run embeds only its questions.
    questions = sum(r["task"] == "chunks" for r in results)
    stored = list((tmp_path / "results" / "index" / "vectors").glob("text-embedding-3-small*/*.npy"))
    assert 1 <= len(stored) <= questions  # one file per filing version
    before = fresh_simulator.stats["embedding_requests"]
    # Another top n: another job id, so ranked again rather than reused.
    _, _, again, _ = run_variant(tmp_path, fresh_simulator, mixed_input, "api-dense-2", **api_dense, PRISM_TOP_N="4")
    assert fresh_simulator.stats["embedding_requests"] - before == again["by_stage"]["embeddings"]["calls"] == questions
    assert again["by_stage"]["embeddings"]["prompt_tokens"] < embeddings["prompt_tokens"] / 5


def test_repeated_runs_are_compared_per_configuration(tmp_path, fresh_simulator, mixed_input):
    fresh_simulator.config.noise = 0.5
    scores = {}
    for prompt in ("p1", "p4"):
        for seed in range(3):
            fresh_simulator.config.seed = seed  # another sample of the provider's noise
            run_id = f"{prompt}-{seed}"
            _, metrics, _, _ = run_variant(
                tmp_path, fresh_simulator, mixed_input, run_id, PRISM_DOC_PROMPT=prompt, PRISM_CHUNK_RANKER="lexical"
            )
            scores.setdefault(prompt, []).append(metrics["documents"]["ndcg@5"])
    runs = [f"{p}-{s}" for p in ("p1", "p4") for s in range(3)]
    done = prism_cli(["eval", *runs], fleet_env(None, None, None), tmp_path)
    assert done.returncode == 0, done.stderr
    comparison = json.loads(done.stdout.strip().splitlines()[-1])
    configs = comparison["configurations"]
    assert len(configs) == 2 and all(len(c["runs"]) == 3 for c in configs.values())
    for prompt, values in scores.items():
        (row,) = [c for name, c in configs.items() if f"llm/{prompt}" in name]
        assert row["documents"]["mean"] == pytest.approx(statistics.mean(values))
        assert row["documents"]["sd"] == pytest.approx(statistics.stdev(values))
    (test,) = [t for t in comparison["welch"] if t["scope"] == "documents"]
    expected = stats.ttest_ind(scores["p1"], scores["p4"], equal_var=False).pvalue
    assert test["p"] == pytest.approx(expected, nan_ok=True)
    report = prism_cli(["report", *runs[:2], runs[3]], fleet_env(None, None, None), tmp_path)
    assert report.returncode == 0, report.stderr
    (folder,) = (tmp_path / "results" / "reports").iterdir()
    assert {p.name for p in folder.iterdir()} >= {"report.md", "comparison.json", "tokens_cost.png", "ndcg.png"}
    assert (folder / "ndcg.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Three document and two page jobs a run: too few for a latency box, and the report says so.
    assert not (folder / "latency.png").exists()
    assert "latency.png is left out: no task with 5 or more jobs" in (folder / "report.md").read_text()
