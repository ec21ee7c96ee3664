"""`prism run --questions Q --corpus URI` end to end: filings made as PDFs, ingested, a question
set run over them, embedded and on a fleet (nightly `--new` after a filing changes); the evidence
table's provenance is checked against the source pages."""

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
from workers.runfiles import RunLayout

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


def acme_filings(folder: Path) -> Path:
    """Acme's two annual reports as PDFs, each with its metadata beside it."""
    folder.mkdir()
    for name, pages in PAGES.items():
        (folder / f"{name}.pdf").write_bytes(pdf(pages))
        year = int(name.split("_")[1])
        (folder / f"{name}.meta.json").write_text(json.dumps({"company": "Acme", "form_type": "10-K", "year": year}))
    return folder


def test_a_question_set_over_a_corpus_cites_the_right_filing_and_page(tmp_path):
    folder = acme_filings(tmp_path / "filings")
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
    assert run.returncode == 3, run.stderr  # an invalid line and a question with no filing: complete with failures
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
        scores = [float(r["score"]) for r in by_question[qid]]  # one scale across filings, best first
        assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1
    # The worker that ranked a pair wrote where its chunks are and their passages: the table is
    # made from the results, not by reading every filing again.
    paths = list((folder_out / "results" / "chunks").glob("*.json"))
    assert len(paths) == 2
    for path in paths:
        result = json.loads(path.read_text())
        cited = [(c["chunk_id"], c["excerpt"]) for c in result["cited"]]
        assert len(cited) == len(result["ranking"]["indices"]) and all(excerpt for _, excerpt in cited)
        assert {c for c, _ in cited} == {
            r["chunk_id"] for r in table if r["question_id"] == result["query_id"].split("@")[0]
        }
    parquet = pq.read_table(folder_out / "evidence.parquet").to_pylist()
    assert [(r["question_id"], r["chunk_id"]) for r in parquet] == [(r["question_id"], r["chunk_id"]) for r in table]
    failures = [json.loads(line) for line in (folder_out / "failures.jsonl").read_text().splitlines()]
    reasons = {f.get("query_id"): f for f in failures}
    assert reasons["other"]["error"].startswith("no filing in scope") and "Globex" in reasons["other"]["error"]
    assert reasons["bad"]["field"] == "scope.period" and reasons["bad"]["line"] == 4
    metrics = json.loads((folder_out / "evidence_metrics.json").read_text())
    assert metrics["judged"] == 2 and metrics["filing_top1"] == 1.0 and metrics["evidence_recall@5"] == 1.0
    evaluated = subprocess.run([prism, "eval", "q1"], env=env, capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout.splitlines()[-1]) == metrics  # the same figures, from the stored run
    report = (folder_out / "report.md").read_text()
    assert "## Evidence" in report and "acme_2022_10k:p2" in report
    # At $0 no tokens to plot: no empty axes, a line why; the judged questions' evidence NDCG@5 is drawn.
    assert [p.name for p in folder_out.glob("*.png")] == ["ndcg.png"] and "![ndcg.png](ndcg.png)" in report
    assert "tokens_cost.png is left out: no LLM tokens" in report
    # Shared inputs: one per filing version in the corpus, none per question in the run.
    assert len(list((tmp_path / "corpus" / "inputs").rglob("*.json"))) == 2
    assert not (folder_out / "inputs").exists()
    again = subprocess.run([*cmd[:-1], "q2"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 3, again.stderr  # the same invalid line and question with no filing
    reran = json.loads((tmp_path / "res" / "runs" / "q2" / "manifest.json").read_text())
    assert reran["counts"]["reused"] == 2 and reran["status"] == "complete_with_failures", reran["counts"]
    # The same questions under new ids: reused at $0, and cited under the ids asked now.
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text("".join(json.dumps(r | {"id": f"new-{r['id']}"}) + "\n" for r in rows))
    cmd_renamed = [prism, "run", "--questions", str(renamed), "--corpus", corpus, "--run-id", "q2b"]
    assert subprocess.run(cmd_renamed, env=env, capture_output=True, text=True, timeout=300).returncode == 3
    out = tmp_path / "res" / "runs" / "q2b"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete_with_failures" and manifest["counts"]["reused"] == 2, manifest["counts"]
    cited = {
        r["question_id"]: r["chunk_id"]
        for r in reversed(list(csv.DictReader(io.StringIO((out / "evidence.csv").read_text()))))
    }
    assert cited == {"new-rev22": "acme_2022_10k:p2", "new-rev23": "acme_2023_10k:p3"}
    # Two filings a question: one ranking across both by one score, the filing of the year asked
    # first (the next year's reports it only as the comparative), a score on every row.
    both = subprocess.run([*cmd[:-1], "q2f", "--filings", "2"], env=env, capture_output=True, text=True, timeout=300)
    assert both.returncode == 3, both.stderr
    rows2 = list(csv.DictReader(io.StringIO((tmp_path / "res" / "runs" / "q2f" / "evidence.csv").read_text())))
    rev22 = [r for r in rows2 if r["question_id"] == "rev22"]
    assert [int(r["rank"]) for r in rev22] == list(range(1, 7))
    assert [r["filing_id"] for r in rev22] == ["acme_2022_10k"] * 3 + ["acme_2023_10k"] * 3
    scores = [float(r["score"]) for r in rev22]
    assert (
        scores == sorted(scores, reverse=True)
        and abs(sum(scores) - 1) < 0.01
        and rev22[0]["chunk_id"] == "acme_2022_10k:p2"
    )
    # A pre-filter makes each pair an input of its own, and keeps the evidence page.
    narrowed = subprocess.run([*cmd[:-1], "q3", "--prefilter-share", "0.6"], env=env, capture_output=True, text=True)
    assert narrowed.returncode == 3, narrowed.stderr
    inputs = [json.loads(p.read_text()) for p in (tmp_path / "res" / "runs" / "q3" / "inputs").rglob("*.json")]
    assert len(inputs) == 2 and all(0 < len(i["chunks"]) < len(PAGES["acme_2022_10k"]) for i in inputs)
    table = list(csv.DictReader(io.StringIO((tmp_path / "res" / "runs" / "q3" / "evidence.csv").read_text())))
    best = {r["question_id"]: r["chunk_id"] for r in reversed(table)}
    assert best == {"rev22": "acme_2022_10k:p2", "rev23": "acme_2023_10k:p3"}


def test_nightly_new_over_a_fleet_ranks_only_the_questions_whose_filing_changed(
    tmp_path, redis_url, s3_server, bucket, simulator, start_worker
):
    from prism.testing.simulator import SimulatorConfig
    from workers.testing import fleet_env, prism_cli, s3_client

    simulator.config = SimulatorConfig(mode="lexical")
    client = s3_client(s3_server)
    beta = ["Beta annual report 2023.", "Gadget sales were 7 million units in 2023.", "Outlook."]
    filings = {**PAGES, "beta_2023_10k": beta}
    for name, pages in filings.items():
        company = name.split("_")[0].capitalize()
        meta = {"company": company, "form_type": "10-K", "year": int(name.split("_")[1])}
        client.put_object(Bucket=bucket, Key=f"drop/{name}.pdf", Body=pdf(pages))
        client.put_object(Bucket=bucket, Key=f"drop/{name}.meta.json", Body=json.dumps(meta).encode())
    rows = [
        {"id": "rev22", "question": "What was widget revenue in FY2022?", "scope": {"company": "Acme"}},
        {"id": "rev23", "question": "What was widget revenue in 2023?", "scope": {"company": "Acme"}},
        {"id": "gadgets", "question": "How many gadget units were sold in FY2023?", "scope": {"company": "Beta"}},
    ]
    client.put_object(Bucket=bucket, Key="q/nightly.jsonl", Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    env = fleet_env(redis_url, s3_server, simulator.url, PRISM_RESULTS=f"s3://{bucket}/prism")
    start_worker(env, 1)
    corpus = f"s3://{bucket}/corpus"
    ingest = ["ingest", f"s3://{bucket}/drop/", "--corpus", corpus]
    assert prism_cli(ingest, env, tmp_path, timeout=300).returncode == 0
    run = ["run", "--questions", f"s3://{bucket}/q/nightly.jsonl", "--corpus", corpus, "--new", "--run-id"]
    first = prism_cli([*run, "night-1"], env, tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "no complete earlier run over" in first.stderr
    served_first = simulator.stats["ok"]
    assert served_first > 0  # ranked by the LLM on the worker

    # A new version of Beta's filing arrives; Acme's are unchanged.
    beta[1] = "Gadget sales were 9 million units in 2023, up from 7 million."
    client.put_object(Bucket=bucket, Key="drop/beta_2023_10k.pdf", Body=pdf(beta))
    again = prism_cli(ingest, env, tmp_path, timeout=300)
    assert "1 new versions, 2 unchanged" in again.stderr, again.stderr
    second = prism_cli([*run, "night-2"], env, tmp_path, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "since run night-1: 0 new and 1 changed filings" in second.stderr, second.stderr
    assert "--new: starting from run night-1, the last complete run over" in second.stderr
    assert "2 unchanged (their results reused at $0)" in second.stderr
    asked = [r["user"] for r in list(simulator.requests)[-(simulator.stats["ok"] - served_first) :]]
    assert asked and all("Gadget" in text for text in asked)  # only Beta's pair went to the LLM

    def get(key: str) -> bytes:
        return client.get_object(Bucket=bucket, Key=f"prism/runs/night-2/{key}")["Body"].read()

    plan = {r["query_id"]: r for r in map(json.loads, get("plan.jsonl").decode().splitlines())}
    assert plan["rev22@acme_2022_10k"]["state"] == "reused" and plan["rev22@acme_2022_10k"]["since"] == "night-1"
    assert plan["gadgets@beta_2023_10k"]["state"] == "enqueued"
    # its form types were ranked by the LLM on the fleet last night, and that ranking is reused
    assert (plan["gadgets"]["task"], plan["gadgets"]["state"]) == ("documents", "reused")
    asked_questions = {r["question_id"]: r for r in map(json.loads, get("questions.jsonl").decode().splitlines())}
    assert asked_questions["gadgets"]["forms_ranked_by"] == "llm"
    manifest = json.loads(get("manifest.json"))
    assert manifest["status"] == "complete" and manifest["since"] == "night-1"
    assert manifest["changes"]["changed_filings"] == 1 and manifest["changes"]["unchanged_questions"] == 2
    assert "since run night-1: 0 new and 1 changed filings" in get("report.md").decode()
    table = list(csv.DictReader(io.StringIO(get("evidence.csv").decode())))
    best = {}
    for row in table:
        best.setdefault(row["question_id"], row)
    assert set(best) == {"rev22", "rev23", "gadgets"}
    assert (best["gadgets"]["filing_id"], best["gadgets"]["page"]) == ("beta_2023_10k", "2")
    assert best["gadgets"]["excerpt"] == beta[1]  # the new version's page, not the old one
    assert (best["rev22"]["filing_id"], best["rev22"]["page"]) == ("acme_2022_10k", "2")
    cost = json.loads(get("cost.json"))
    assert cost["total"]["calls"] > 0 and {j["query_id"] for j in cost["jobs"]} == {"gadgets@beta_2023_10k"}
    # The unchanged questions' results are the first night's, by reference: no file per question here.
    stored = client.list_objects_v2(Bucket=bucket, Prefix="prism/runs/night-2/")["Contents"]
    per_query = sorted(
        o["Key"].split("night-2/")[1] for o in stored if "/results/" in o["Key"] or "/questions/" in o["Key"]
    )
    layout = RunLayout("night-2")
    expected = [layout.result("chunks", "gadgets@beta_2023_10k"), layout.result("documents", "gadgets")]
    assert per_query == [key.removeprefix("runs/night-2/") for key in expected], per_query


def test_the_evidence_ranker_answers_each_question_from_the_pages_it_cites(tmp_path, simulator):
    from prism.testing.simulator import SimulatorConfig

    simulator.config = SimulatorConfig(mode="lexical")
    folder = acme_filings(tmp_path / "filings")
    questions = tmp_path / "questions.jsonl"
    row = {"id": "rev22", "question": "What was widget revenue in FY2022?", "scope": {"company": "Acme"}}
    questions.write_text(json.dumps(row) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRISM_", "OPENAI_"))}
    env |= {"PRISM_RESULTS": str(tmp_path / "res"), "PRISM_LLM_BASE_URL": simulator.url, "PRISM_LLM_API_KEY": "sk-x"}
    env |= {"PRISM_CHUNK_RANKER": "evidence"}
    prism = str(Path(sys.executable).parent / "prism")
    corpus = str(tmp_path / "corpus")
    assert (
        subprocess.run([prism, "ingest", str(folder), "--corpus", corpus], env=env, capture_output=True).returncode == 0
    )
    cmd = [prism, "run", "--questions", str(questions), "--corpus", corpus, "--run-id", "ev"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "res" / "runs" / "ev"
    table = list(csv.DictReader(io.StringIO((out / "evidence.csv").read_text())))
    assert table and all(r["filing_id"] == "acme_2022_10k" for r in table)
    answer = table[0]["answer"]
    assert answer and all(r["answer"] == answer for r in table)  # one answer per question, every row its citation
    assert "Widget revenue" in answer  # the simulator answers from the passage it was given
    assert f"answer: {answer[:50]}" in (out / "report.md").read_text()
