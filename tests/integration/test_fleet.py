"""`prism run` end to end: the producer, real `celery worker` processes on Redis, results in
the S3 server, the LLM simulator over HTTP; and the embedded default with nothing configured."""

import csv
import gzip
import json
import subprocess
import sys
from decimal import Decimal

import pytest
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

from producer.prompt_check import CHECK_NAME
from tests.conftest import DOC_DEV, PAGES, ROOT, ROWS_SAMPLE, fleet_env, prism_cli, s3_client

pytestmark = pytest.mark.integration


def s3_json(client, bucket, key):
    return json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def s3_keys(client, bucket, prefix):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_fleet_run_puts_one_result_per_valid_query_in_s3(
    tmp_path, redis_url, s3_server, bucket, fresh_simulator, start_worker
):
    client = s3_client(s3_server)
    with gzip.open(PAGES, "rt") as f:
        pages = [next(f) for _ in range(6)]
    bad_row = '{"uuid": "broken", "messages": [{"role": "user", "content": "no candidates"}]}\n'
    lines = DOC_DEV.read_text().splitlines(keepends=True)[:100] + [bad_row] + pages
    client.put_object(Bucket=bucket, Key="in/mixed.jsonl.gz", Body=gzip.compress("".join(lines).encode()))

    env = fleet_env(redis_url, s3_server, fresh_simulator.url)
    start_worker(env)
    start_worker(env)
    results = f"s3://{bucket}/prism"
    run = prism_cli(["run", f"s3://{bucket}/in/mixed.jsonl.gz", "--results", results, "--run-id", "e2e"], env, tmp_path)
    assert run.returncode == 3, run.stderr[-3000:]  # its one invalid row: complete with failures

    base = "prism/runs/e2e"
    documents = s3_keys(client, bucket, f"{base}/results/documents/")
    chunks = s3_keys(client, bucket, f"{base}/results/chunks/")
    assert len(documents) == 100 and len(chunks) == 6, run.stderr[-3000:]
    manifest = s3_json(client, bucket, f"{base}/manifest.json")
    assert manifest["status"] == "complete_with_failures"  # its one invalid row
    counts = manifest["counts"]
    assert (counts["documents"], counts["chunks"], counts["done"], counts["failed"], counts["invalid_rows"]) == (
        100,
        6,
        106,
        0,
        1,
    )
    assert manifest["settings"]["llm_api_key"] == "**********" and "sk-test" not in json.dumps(manifest)

    failures = client.get_object(Bucket=bucket, Key=f"{base}/failures.jsonl")["Body"].read().decode().splitlines()
    (failure,) = [json.loads(line) for line in failures]
    assert failure["line"] == 101 and failure["field"] == "messages" and failure["query_id"] == "broken"

    # cost.json is the sum of the per-call records in the result files.
    records = [s3_json(client, bucket, key) for key in documents + chunks]
    check = s3_json(client, bucket, f"{base}/spent/{CHECK_NAME}.json")  # the run's system-prompt check
    calls = [c for r in [*records, check] for c in r["calls"]]
    cost = s3_json(client, bucket, f"{base}/cost.json")
    assert cost["total"]["calls"] == len(calls) >= 108 and cost["by_task"]["run"]["calls"] == len(check["calls"]) == 2
    assert Decimal(cost["total"]["usd"]) == sum(Decimal(c["usd"]) for c in calls) > 0
    assert cost["total"]["prompt_tokens"] == sum(c["usage"]["prompt_tokens"] for c in calls)
    assert cost["by_task"]["documents"]["calls"] == 100
    assert cost["by_task"]["chunks"]["calls"] == sum(len(r["calls"]) for r in records if r["task"] == "chunks")
    assert set(cost["by_stage"]) == {"documents", "segments", "rerank"}
    assert sum(j["calls"] for j in cost["jobs"]) == len(calls)
    assert all(r["ranking"]["flags"] == [] for r in records)
    assert max(r["segments"] for r in records) > 1

    # prism eval agrees with ranx; with a noiseless oracle every ranking is perfect.
    evaluated = prism_cli(["eval", "e2e", "--results", results], env, tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    metrics = json.loads(evaluated.stdout.strip().splitlines()[-1])
    qrel_lines = client.get_object(Bucket=bucket, Key=f"{base}/qrels.jsonl")["Body"].read().splitlines()
    qrels = {row["query_id"]: row["qrel"] for row in map(json.loads, qrel_lines)}
    for task, _keys in (("documents", documents), ("chunks", chunks)):
        run_ = Run(
            {
                r["query_id"]: {str(i): 10.0 - p for p, i in enumerate(r["ranking"]["indices"])}
                for r in records
                if r["task"] == task
            }
        )
        qr = Qrels({q: {i: g for i, g in qrels[q].items() if g > 0} for q in run_.keys()})
        expected = ranx_evaluate(qr, run_, ["ndcg@5", "mrr@5", "map@5"])
        for name in ("ndcg@5", "mrr@5", "map@5"):
            assert metrics[task][name] == pytest.approx(expected[name], abs=1e-9)
    assert metrics["documents"]["ndcg@5"] == pytest.approx(1.0) and metrics["chunks"]["ndcg@5"] == pytest.approx(1.0)

    status = prism_cli(["status", "e2e", "--results", results], env, tmp_path)
    assert status.returncode == 0 and "106" in status.stdout


# A command run in this process, saying at its exit whether Celery was ever imported.
_WITHOUT_CELERY = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('celery loaded:', 'celery' in sys.modules))\n"
    "from producer.cli import main\n"
    "sys.argv = ['prism', *sys.argv[1:]]\n"
    "main()\n"
)


def test_embedded_default_runs_the_main_job_on_the_bundled_edgar_filings(tmp_path):
    """Nothing configured, no input: the bundled real EDGAR filings are ingested, their question
    set runs over them at $0, and the evidence table's path is said."""
    env = fleet_env(None, None, None)
    run = prism_cli(["run", "--run-id", "sample"], env, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    questions = sum(1 for _ in (ROOT / "prism" / "data" / "edgar" / "questions.jsonl").open())
    assert "No LLM was used" in run.stdout and f"{questions} done (0 reused), 0 failed" in run.stdout
    base = tmp_path / "results" / "runs" / "sample"
    assert f"evidence table: {base}/evidence.csv" in run.stdout
    manifest = json.loads((base / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["embedded"] and manifest["config"]["doc_ranker"] == "prior"
    assert manifest["corpus"] == str(tmp_path / "results" / "sample-corpus")
    rows = list(csv.DictReader((base / "evidence.csv").open()))
    assert {r["question_id"] for r in rows} == {
        json.loads(q)["id"] for q in (ROOT / "prism" / "data" / "edgar" / "questions.jsonl").open()
    }
    evidence = json.loads((base / "evidence_metrics.json").read_text())
    assert evidence["judged"] == questions and evidence["filing_top1"] == 1.0
    cost = json.loads((base / "cost.json").read_text())
    assert cost["total"]["calls"] == 0 and (base / "report.md").read_text().startswith("# Run sample")
    # The commands that read a run need no fleet: with no broker they load no Celery.
    site = tmp_path / "site"
    for args in (
        ["report", "sample"],
        ["status", "sample"],
        ["eval", "sample"],
        ["view", "sample", "--out", str(site)],
    ):
        read = subprocess.run(
            [sys.executable, "-c", _WITHOUT_CELERY, *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert read.returncode == 0 and "celery loaded: False" in read.stdout, (args, read.stdout, read.stderr[-2000:])
    assert (site / "index.html").exists()
    # A second make run finds the filings ingested: not read again.
    again = prism_cli(["run", "--run-id", "sample-2"], env, tmp_path)
    assert again.returncode == 0 and "7 real EDGAR filings" in again.stderr


def test_embedded_llm_run_reports_an_unpriced_model_as_unpriced(tmp_path, fresh_simulator):
    env = fleet_env(None, None, fresh_simulator.url, PRISM_LLM_MODEL="acme-ranker-9000")
    run = prism_cli(["run", str(ROWS_SAMPLE), "--run-id", "unpriced"], env, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    cost = json.loads((tmp_path / "results" / "runs" / "unpriced" / "cost.json").read_text())
    total = cost["total"]
    assert total["calls"] >= 12 and total["unpriced_calls"] == total["calls"] and Decimal(total["usd"]) == 0
    assert f"{total['calls']} unpriced call(s)" in run.stdout
    # Unknown is unknown wherever a cost is shown: the summary, the report and prism status.
    report = (tmp_path / "results" / "runs" / "unpriced" / "report.md").read_text()
    status = prism_cli(["status", "unpriced"], env, tmp_path)
    assert status.returncode == 0, status.stderr
    for shown in (run.stdout, report, status.stdout):
        assert "0.0000" not in shown and "unknown" in shown, shown[-2000:]
    assert f"At list price the calls made cost unknown ({total['calls']} unpriced call(s))" in report
