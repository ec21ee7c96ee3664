"""The embedded default at a realistic size: the 150 FinanceBench questions over their 74 filings
at $0, and a run whose every query is many chords deep on one worker thread. Both once stalled
(a free thread waited on the broker's ack loop; unfinished work was enqueued again as
duplicates), so each checks the run ends complete with nothing enqueued twice."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from producer.ingest import ingest_source
from tests.conftest import PAGES, SHARED
from workers.corpus import Corpus
from workers.store import LocalStore
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.integration

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
QUESTIONS = SHARED / "financebench" / "financebench_open_source.jsonl"


def manifest(results: Path, run_id: str) -> dict:
    return json.loads((results / "runs" / run_id / "manifest.json").read_text())


def test_the_financebench_question_set_completes_embedded_at_no_cost(tmp_path):
    ingest_source(PAGES, LocalStore(tmp_path / "corpus"), meta=DOC_INFO)
    in_corpus = set(Corpus(LocalStore(tmp_path / "corpus")).catalog.all_filings())
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    with (tmp_path / "questions.jsonl").open("w") as out:
        for q in rows:
            pages = sorted({e["evidence_page_num"] + 1 for e in q["evidence"]})
            qrels = [{"filing": q["doc_name"], "page": p, "grade": 2} for p in pages]
            record = {"id": q["financebench_id"], "question": q["question"], "scope": {"company": q["company"]}}
            out.write(json.dumps(record | {"qrels": qrels}) + "\n")
    results = tmp_path / "results"
    env = fleet_env(None, None, None, PRISM_RESULTS=str(results))
    args = ["run", "--questions", "questions.jsonl", "--corpus", str(tmp_path / "corpus"), "--run-id", "fb150"]
    done = prism_cli(args, env, tmp_path, timeout=600)
    assert done.returncode == 3, done.stderr[-3000:]  # questions whose company has no filing here
    assert "enqueuing" not in done.stderr and "Traceback" not in done.stderr

    run = manifest(results, "fb150")
    assert run["status"] == "complete_with_failures" and run["requeues"] == 0, run["counts"]
    counts = run["counts"]
    assert counts["pending"] == 0 and counts["done"] + counts["failed"] == counts["chunks"] >= len(rows)
    failures = [json.loads(line) for line in (results / "runs/fb150/failures.jsonl").read_text().splitlines()]
    assert all(f["error"].startswith("no filing in scope") for f in failures)  # the rest were ranked
    # The questions whose evidence filing is in the corpus are judged; the $0 retriever's floor.
    metrics = json.loads((results / "runs/fb150/evidence_metrics.json").read_text())
    judged = sum(1 for q in rows if q["doc_name"] in in_corpus)
    assert metrics["judged"] == judged > 100
    assert metrics["filing_top1"] >= 0.9 and metrics["evidence_ndcg@5"] >= 0.6, metrics


def test_a_run_many_chords_deep_completes_on_one_worker_thread(tmp_path, simulator):
    """Small segments make every page query a chord of chords (segments, then more levels, then
    the pool re-rank): with one thread, each aggregation must still find a thread."""
    with gzip.open(PAGES, "rt") as rows:
        (tmp_path / "rows.jsonl").write_text("".join(next(rows) for _ in range(2)))
    results = tmp_path / "results"
    env = fleet_env(None, None, simulator.url, PRISM_RESULTS=str(results))
    env |= {"PRISM_EMBEDDED_WORKERS": "1", "PRISM_SEGMENT_TOKENS": "6000", "PRISM_CACHE": "false"}
    done = prism_cli(["run", "rows.jsonl", "--run-id", "deep"], env, tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = manifest(results, "deep")
    assert run["status"] == "complete" and run["requeues"] == 0 and run["counts"]["done"] == 2, run["counts"]
    chunk_results = [json.loads(p.read_text()) for p in (results / "runs/deep/results/chunks").glob("*.json")]
    assert len(chunk_results) == 2
    assert all(r["segments"] >= 10 and r["levels"] >= 2 for r in chunk_results), [
        (r["segments"], r["levels"]) for r in chunk_results
    ]


def test_chunk_rows_over_one_filing_are_planned_on_the_fleet_from_one_stored_input(tmp_path):
    """The producer stores each distinct candidate list once and sends a planning task per row;
    the tasks make the list's input once and every row is ranked from it."""
    filing = [f"Page {i}: revenue by segment was {i * 7} million dollars in fiscal 2023." for i in range(40)]
    other = [f"Page {i}: the board met {i} times and approved a dividend." for i in range(12)]
    rows = [{"id": f"q{i}", "task": "chunks", "question": f"What was revenue in segment {i}?"} for i in range(4)]
    rows[0]["candidates"] = rows[1]["candidates"] = rows[2]["candidates"] = filing
    rows[3]["candidates"] = other
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = tmp_path / "results"
    env = fleet_env(None, None, None, PRISM_RESULTS=str(results))
    done = prism_cli(["run", "rows.jsonl", "--run-id", "shared"], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert manifest(results, "shared")["counts"]["done"] == 4
    inputs = sorted(p.name for p in (results / "runs/shared/inputs").iterdir())
    assert len(inputs) == 4 and sum(name.startswith("candidates-") for name in inputs) == 4, inputs
    stored = [json.loads(p.read_text()) for p in (results / "runs/shared/inputs").iterdir()]
    assert sorted(len(s) if isinstance(s, list) else len(s["chunks"]) for s in stored) == [12, 12, 40, 40]
    ranked = [json.loads(p.read_text()) for p in (results / "runs/shared/results/chunks").glob("*.json")]
    assert sorted(r["n_candidates"] for r in ranked) == [12, 40, 40, 40]
