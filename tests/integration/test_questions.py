"""`prism run --questions Q --corpus URI` end to end, embedded: filings made as PDFs, ingested,
a question set run over them; the evidence table's provenance is checked against the source pages."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.filings import pdf

PAGES = {
    "acme_2022_10k": [
        "Acme annual report 2022 cover.",
        "Widget revenue was 40 million dollars in fiscal 2022.",
        "Risks.",
    ],
    "acme_2023_10k": [
        "Acme annual report 2023 cover.",
        "Board of directors.",
        "Widget revenue was 55 million in 2023.",
    ],
}


def test_a_question_set_over_a_corpus_cites_the_right_filing_and_page(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    for name, pages in PAGES.items():
        (folder / f"{name}.pdf").write_bytes(pdf(pages))
        year = int(name.split("_")[1])
        (folder / f"{name}.meta.json").write_text(json.dumps({"company": "Acme", "form_type": "10-K", "year": year}))
    questions = tmp_path / "questions.jsonl"
    rows = [
        {
            "id": "rev22",
            "question": "What was widget revenue in FY2022?",
            "scope": {"company": "Acme"},
            "qrels": [{"filing": "acme_2022_10k", "page": 2, "grade": 2}],
        },
        {
            "id": "rev23",
            "question": "What was widget revenue in 2023?",
            "scope": {"company": "ACME"},
            "qrels": [{"filing": "acme_2023_10k", "page": 3, "grade": 2}],
        },
        {"id": "other", "question": "What was widget revenue?", "scope": {"company": "Globex"}},
        {"id": "bad", "question": "x", "scope": {"period": "soon"}},
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRISM_")} | {"PRISM_RESULTS": str(tmp_path / "res")}
    prism = str(Path(sys.executable).parent / "prism")
    corpus = str(tmp_path / "corpus")
    ingest = subprocess.run([prism, "ingest", str(folder), "--corpus", corpus], env=env, capture_output=True, text=True)
    assert ingest.returncode == 0, ingest.stderr
    cmd = [prism, "run", "--questions", str(questions), "--corpus", corpus, "--run-id", "q1"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    folder_out = tmp_path / "res" / "runs" / "q1"
    table = list(csv.DictReader(io.StringIO((folder_out / "evidence.csv").read_text())))
    by_question = {}
    for row in table:
        by_question.setdefault(row["question_id"], []).append(row)
    assert set(by_question) == {"rev22", "rev23"}
    for qid, filing, page in (("rev22", "acme_2022_10k", 2), ("rev23", "acme_2023_10k", 3)):
        best = by_question[qid][0]
        assert (best["filing_id"], int(best["page"]), best["chunk_id"]) == (filing, page, f"{filing}:p{page}")
        assert best["company"] == "Acme" and best["form_type"] == "10-K" and best["grade"] == "2"
        assert best["excerpt"] == " ".join(PAGES[filing][page - 1].split())  # the source page's own text
        assert all(r["filing_id"] == filing for r in by_question[qid])
    parquet = pq.read_table(folder_out / "evidence.parquet").to_pylist()
    assert [(r["question_id"], r["chunk_id"]) for r in parquet] == [(r["question_id"], r["chunk_id"]) for r in table]
    failures = [json.loads(line) for line in (folder_out / "failures.jsonl").read_text().splitlines()]
    reasons = {f.get("query_id"): f for f in failures}
    assert reasons["other"]["error"].startswith("no filing in scope") and "Globex" in reasons["other"]["error"]
    assert reasons["bad"]["field"] == "scope.period" and reasons["bad"]["line"] == 4
    metrics = json.loads((folder_out / "evidence_metrics.json").read_text())
    assert metrics["judged"] == 2 and metrics["filing_top1"] == 1.0 and metrics["evidence_recall@5"] == 1.0
    report = (folder_out / "report.md").read_text()
    assert "## Evidence" in report and "acme_2022_10k:p2" in report
    # Shared inputs: one per filing version in the corpus, none per question in the run.
    assert len(list((tmp_path / "corpus" / "corpus" / "inputs").rglob("*.json"))) == 2
    assert not (folder_out / "inputs").exists()
    again = subprocess.run([*cmd[:-1], "q2"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "reused 2" in again.stderr, again.stderr
