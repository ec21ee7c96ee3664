"""`prism estimate --questions Q --corpus C` against the run it prices: a small FinanceBench
question set over five of its filings, documents and chunks ranked by the LLM on the provider
simulator. The estimate's calls and prompt tokens are within 15% of the run's cost.json."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from producer.ingest import ingest_source
from tests.conftest import PAGES, SHARED
from workers.store import LocalStore
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.integration

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
# One filing per company but Foot Locker (two 8-Ks: the latest is chosen), so the filings the run's
# LLM document ranking leads to are the ones the estimate's prior chose; Best Buy's 10-K is over
# one segment (segments, then a re-rank), the others fit one.
FILINGS = (
    "BESTBUY_2023_10K",
    "FOOTLOCKER_2022_8K_dated-2022-05-20",
    "FOOTLOCKER_2022_8K_dated_2022-08-19",
    "MGMRESORTS_2022Q4_EARNINGS",
    "JOHNSON_JOHNSON_2022Q4_EARNINGS",
)
QUESTIONS = [
    ("bb1", "Best Buy", "What are major acquisitions that Best Buy has done in FY2023, FY2022 and FY2021?"),
    ("bb2", "Best Buy", "Which activities brought in the most cash flow for Best Buy in FY2023?"),
    ("fl", "Foot Locker", "Does Foot Locker's new CEO have previous CEO experience in a similar company?"),
    ("mgm1", "MGM Resorts", "Which region had the Highest EBITDAR Contribution for MGM during FY2022?"),
    ("mgm2", "MGM Resorts", "Which region had the worst topline performance for MGM during FY2022?"),
    ("jnj", "Johnson & Johnson", "How did JnJ's US sales growth compare to international sales growth in FY2022?"),
    ("globex", "Globex", "What was Globex revenue in FY2022?"),  # no filing in scope
]
STAGE = re.compile(r"^(documents|segments|rerank): (\d+) calls, (\d+) prompt tokens \((\d+) cacheable\)", re.M)


def _corpus(tmp_path: Path) -> Path:
    rows, seen = tmp_path / "rows.jsonl", set()
    with gzip.open(PAGES, "rt") as source, rows.open("w") as out:
        for line in source:
            name = json.loads(line)["doc_name"]
            if name in FILINGS and name not in seen:
                seen.add(name)
                out.write(line)
    assert seen == set(FILINGS)
    ingest_source(rows, LocalStore(tmp_path / "corpus"), meta=DOC_INFO)
    return tmp_path / "corpus"


def test_a_question_set_estimate_is_within_15_percent_of_its_run(tmp_path, fresh_simulator):
    corpus = _corpus(tmp_path)
    lines = [json.dumps({"id": i, "question": q, "scope": {"company": c}}) for i, c, q in QUESTIONS]
    lines.append(json.dumps({"id": "bad", "question": "x", "scope": {"period": "soon"}}))
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n")
    results = tmp_path / "results"
    env = fleet_env(None, None, fresh_simulator.url, PRISM_RESULTS=str(results))
    env |= {"PRISM_DOC_RANKER": "llm", "PRISM_CHUNK_RANKER": "llm", "PRISM_CACHE": "false"}
    files_before = sorted(p for p in corpus.rglob("*"))

    said = prism_cli(["estimate", "--questions", "questions.jsonl", "--corpus", str(corpus)], env, tmp_path, 300)
    assert said.returncode == 0, said.stderr[-3000:]
    out = said.stdout
    assert "7 questions read from questions.jsonl (1 bad line, not priced), 1 with no filing in scope" in out, out
    assert "6 filings chosen" in out and "6 document ranking calls (llm)" in out, out
    assert "questions.jsonl: line 8, field 'scope.period'" in out and "globex (line 7): no filing in scope" in out
    assert fresh_simulator.stats["requests"] == 0  # no LLM call
    assert sorted(p for p in corpus.rglob("*")) == files_before and not results.exists()  # nothing written
    found = STAGE.findall(out)
    estimated = {stage: (int(calls), int(tokens)) for stage, calls, tokens, _ in found}
    cacheable = {stage: int(cached) for stage, _, _, cached in found}
    assert set(estimated) == {"documents", "segments", "rerank"}, out

    done = prism_cli(["run", "--questions", "questions.jsonl", "--corpus", str(corpus), "--run-id", "e"], env, tmp_path)
    assert done.returncode == 3, done.stderr[-3000:]  # the bad line and Globex: complete with failures
    cost = json.loads((results / "runs" / "e" / "cost.json").read_text())
    # A run may spend calls of its own beside the questions' (a check of the endpoint when it
    # starts): they are no part of what the estimate prices.
    own = [j for j in cost["jobs"] if j["query_id"] not in {i for i, _, _ in QUESTIONS} and "@" not in j["query_id"]]
    actual = {s: (v["calls"], v["prompt_tokens"]) for s, v in cost["by_stage"].items()}
    calls = cost["total"]["calls"] - sum(j["calls"] for j in own)
    tokens = cost["total"]["prompt_tokens"] - sum(j["prompt_tokens"] for j in own)
    total_calls = sum(c for c, _ in estimated.values())
    total_tokens = sum(t for _, t in estimated.values())
    cached = {s: v["cached_tokens"] for s, v in cost["by_stage"].items()}
    figures = (
        f"estimated (calls, prompt tokens) {estimated}, in all ({total_calls}, {total_tokens}), cacheable {cacheable}; "
        f"run {actual}, the questions' ({calls}, {tokens}), cached {cached}; the run's own {len(own)} jobs"
    )
    print(figures)
    assert abs(total_calls / calls - 1) <= 0.15, figures
    assert abs(total_tokens / tokens - 1) <= 0.15, figures
    for stage in ("segments", "rerank"):  # the document calls may carry the run's own
        assert abs(estimated[stage][0] / actual[stage][0] - 1) <= 0.15, figures
        assert abs(estimated[stage][1] / actual[stage][1] - 1) <= 0.15, figures
    # The run's report sets the same estimate beside what it spent, stage by stage.
    report = (results / "runs" / "e" / "report.md").read_text()
    section = report.split("## Estimate beside actual", 1)[1].split("\n## ", 1)[0]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in section.splitlines() if line.startswith("| ")}
    for stage, (calls_, tokens_) in estimated.items():
        assert (int(rows[stage][0]), int(rows[stage][2])) == (calls_, tokens_), section
    assert int(rows["segments"][1]) == actual["segments"][0] and "Estimated USD at the run's tier" in section


def test_the_estimate_and_the_planning_task_plan_the_shared_question_set_alike(tmp_path):
    """The real EDGAR filings and their 37 questions: `prism estimate` plans each question through
    the same planner as the fleet's planning task, so each gets the same period and the same
    filings in the same order (the document prior ranks the forms in both)."""
    from producer.estimate import plan_questions
    from workers.corpus import Corpus
    from workers.settings import load_settings

    edgar = SHARED / "edgar"
    ingest_source(edgar / "filings", LocalStore(tmp_path / "corpus"))
    keys = ("id", "question", "scope", "qrels", "answer")
    questions = tmp_path / "questions.jsonl"
    rows = [json.loads(line) for line in (edgar / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions.write_text("".join(json.dumps({k: r[k] for k in keys if k in r}) + "\n" for r in rows))
    env = fleet_env(None, None, None, PRISM_DOC_RANKER="prior")
    args = ["run", "--questions", str(questions), "--corpus", str(tmp_path / "corpus"), "--run-id", "alike"]
    done = prism_cli(args, env, tmp_path)
    assert done.returncode in (0, 3), done.stderr[-2000:]
    ran = [json.loads(line) for line in (tmp_path / "results" / "runs" / "alike" / "questions.jsonl").open()]
    settings = load_settings(doc_ranker="prior")
    planned, bad = plan_questions(
        str(questions), Corpus(LocalStore(tmp_path / "corpus")), settings, settings.run_config()
    )
    assert not bad and len(planned) == len(ran) == len(rows)
    by_task = {q["question_id"]: (q["period"], [f["filing"] for f in q["filings"]]) for q in ran}
    by_estimate = {p.question.id: (p.period, [c.filing_id for c in p.filings]) for p in planned}
    assert by_estimate == by_task
    assert sum(1 for _, filings in by_task.values() if filings) >= 30  # most questions find their filing
