"""Reruns that cost nothing, budgets, duplicate deliveries, context overflows and corpus
inputs, through real celery workers, Redis, the S3 server and the simulator over HTTP."""

import json
from decimal import Decimal

import pytest

from prism.models import RunConfig, job_id
from producer.prompt_check import CHECK_NAME
from tests.conftest import DOC_DEV, check_calls, fleet_env, load, prism_cli, read_run, upload_input
from workers.messages import DocumentJob
from workers.runtime import Runtime
from workers.settings import Settings
from workers.testing import drop_queue, queued

pytestmark = pytest.mark.integration


@pytest.fixture()
def fleet(redis_url, s3_server, fresh_simulator, start_worker):
    env = fleet_env(redis_url, s3_server, fresh_simulator.url, PRISM_STALL_S="5")
    start_worker(env)
    return env


def test_a_rerun_of_unchanged_input_makes_no_llm_calls(tmp_path, fleet, s3_server, bucket, fresh_simulator):
    # A nightly input is a prefix of files: two here.
    upload_input(s3_server, bucket, "in/nightly/part-1.jsonl.gz", documents=30)
    upload_input(s3_server, bucket, "in/nightly/part-2.jsonl.gz", pages=2)
    source = f"s3://{bucket}/in/nightly/"
    results = f"s3://{bucket}/prism"
    first = prism_cli(["run", source, "--results", results, "--run-id", "night-1"], fleet, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    requests = fresh_simulator.stats["requests"]
    one = read_run(s3_server, bucket, "night-1")
    assert one["manifest"]["counts"]["done"] == 32 and one["cost"]["total"]["cached_calls"] == 0

    # Same input, same config, a new run: every result is reused, nothing is called.
    second = prism_cli(["run", source, "--results", results, "--run-id", "night-2"], fleet, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    two = read_run(s3_server, bucket, "night-2")
    assert two["manifest"]["counts"]["reused"] == 32 and two["cost"]["total"]["calls"] == 0
    assert all(r["reused_from"] == "night-1" for r in two["results"])
    assert fresh_simulator.stats["requests"] == requests

    # Forced to rank again: the same requests are answered from the response cache, at $0.
    third = prism_cli(["run", source, "--results", results, "--run-id", "night-3", "--fresh"], fleet, tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    three = read_run(s3_server, bucket, "night-3")
    total = three["cost"]["total"]
    ranked = one["cost"]["total"]["calls"] - check_calls(one["cost"])  # the check is kept: not made again
    assert total["calls"] == total["cached_calls"] == ranked and Decimal(total["usd"]) == 0
    assert fresh_simulator.stats["requests"] == requests
    # The response cache saved what the first run paid for the same calls.
    levers = three["cost"]["savings_by_lever"]
    check = next(j for j in one["cost"]["jobs"] if j["query_id"] == CHECK_NAME)  # not ranking: not cached
    assert Decimal(levers["response_cache_usd"]) == Decimal(one["cost"]["total"]["usd"]) - Decimal(check["usd"]) > 0
    assert Decimal(levers["list_usd"]) == 0 and Decimal(one["cost"]["savings_by_lever"]["list_usd"]) > 0
    assert sorted(r["ranking"]["indices"] for r in three["results"]) == sorted(
        r["ranking"]["indices"] for r in one["results"]
    )

    # The same run id again: it holds every result already.
    again = prism_cli(["run", source, "--results", results, "--run-id", "night-1"], fleet, tmp_path)
    assert "already done 32" in again.stderr and "enqueued 0" in again.stderr


def test_a_budget_stops_the_run_and_resume_finishes_it(tmp_path, fleet, s3_server, bucket):
    source = upload_input(s3_server, bucket, "in/budget.jsonl.gz", documents=60)
    results = f"s3://{bucket}/prism"
    # A document call reserves about $0.0022 (1,000 output tokens at $2/M) and spends about $0.00017.
    run = prism_cli(
        ["run", source, "--results", results, "--run-id", "capped", "--budget-usd", "0.005", "--fresh"], fleet, tmp_path
    )
    assert run.returncode == 4, run.stderr[-3000:]
    capped = read_run(s3_server, bucket, "capped")
    m = capped["manifest"]
    assert m["status"] == "budget_exhausted"
    assert (
        0 < m["counts"]["done"] < 60
        and m["counts"]["done"] + m["counts"]["pending"] == 60
        and m["counts"]["failed"] == 0
    )
    assert Decimal(capped["cost"]["total"]["usd"]) <= Decimal("0.005")

    resumed = prism_cli(["resume", "capped", "--results", results, "--budget-usd", "1"], fleet, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    done = read_run(s3_server, bucket, "capped")
    assert done["manifest"]["status"] == "complete" and done["manifest"]["counts"]["done"] == 60
    # one call per document, none paid twice; and the run's system-prompt check, made once
    assert done["cost"]["total"]["calls"] == 60 + check_calls(done["cost"]) and check_calls(done["cost"]) == 2


def test_a_second_delivery_stores_nothing_twice_and_keeps_its_calls(s3_server, bucket, fresh_simulator, monkeypatch):
    from tasks.ranking import rank_documents
    from tests.conftest import S3_KEYS

    for key, value in S3_KEYS.items():
        monkeypatch.setenv(key, value)
    settings = Settings(
        s3_endpoint_url=s3_server,
        llm_base_url=fresh_simulator.url,
        llm_api_key="sk-test",
        cache=False,
        results=f"s3://{bucket}/prism",
    )
    rank_documents.app.prism_runtime = Runtime(settings)
    q = load(DOC_DEV, limit=1)[0]
    config = RunConfig(doc_ranker="llm")
    job = DocumentJob(
        run_id="dup",
        results=f"s3://{bucket}/prism",
        job_id=job_id(q, config),
        query_id=q.id,
        line=1,
        config=config,
        question=q.question,
        candidates=q.candidates,
    )
    message = job.model_dump(mode="json")
    rank_documents(message)
    rank_documents(message)  # the broker delivered it again
    run = {k: v for k, v in read_run_partial(s3_server, bucket, "dup").items()}
    assert len(run["results"]) == 1 and len(run["spent"]) == 1
    assert run["spent"][0]["reason"].startswith("duplicate delivery") and len(run["spent"][0]["calls"]) == 1


def read_run_partial(endpoint, bucket, run_id):
    from tests.conftest import s3_client

    client = s3_client(endpoint)
    out = {}
    for sub in ("results", "spent"):
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"prism/runs/{run_id}/{sub}/")
        out[sub] = [
            json.loads(client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())
            for p in pages
            for o in p.get("Contents", [])
        ]
    return out


def test_a_context_overflow_re_splits_the_segment(tmp_path, fresh_simulator):
    fresh_simulator.config.context_tokens = 12_000  # segments are cut for 32,000 tokens
    env = fleet_env(None, None, fresh_simulator.url, PRISM_CHUNK_RANKER="llm", PRISM_DOC_RANKER="lexical")
    source = tmp_path / "pages.jsonl"
    import gzip

    from tests.conftest import PAGES

    with gzip.open(PAGES, "rt") as f:
        source.write_text(next(f))
    run = prism_cli(["run", str(source), "--run-id", "small-context"], env, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    (result,) = (tmp_path / "results" / "runs" / "small-context" / "results" / "chunks").glob("*.json")
    data = json.loads(result.read_text())
    assert "degraded" not in data["ranking"]["flags"]
    assert any("over the model context" in n for n in data["ranking"]["notes"])
    assert fresh_simulator.stats["context_length"] > 0
    metrics = json.loads((tmp_path / "results" / "runs" / "small-context" / "metrics.json").read_text())
    assert metrics["chunks"]["ndcg@5"] == 1.0


def test_a_folder_of_files_is_one_input_with_errors_naming_the_file(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "2024").mkdir(parents=True)
    lines = DOC_DEV.read_text().splitlines(keepends=True)
    (corpus / "2024" / "a.jsonl").write_text("".join(lines[:5]))
    (corpus / "2024" / "b.jsonl").write_text("".join(lines[5:8]) + "{broken\n")
    (corpus / "notes.txt").write_text("not an input")
    env = fleet_env(None, None, None)
    run = prism_cli(["run", str(corpus), "--run-id", "corpus"], env, tmp_path)
    assert run.returncode == 3, run.stderr[-3000:]
    base = tmp_path / "results" / "runs" / "corpus"
    manifest = json.loads((base / "manifest.json").read_text())
    assert manifest["counts"]["done"] == 8 and manifest["counts"]["invalid_rows"] == 1
    (failure,) = [json.loads(line) for line in (base / "failures.jsonl").read_text().splitlines()]
    assert failure["source"].endswith("2024/b.jsonl") and failure["line"] == 4


def test_the_fleet_limiter_keeps_the_provider_limit_and_gives_slots_back(
    tmp_path, redis_url, s3_server, bucket, fresh_simulator, start_worker
):
    fresh_simulator.config.rpm, fresh_simulator.config.window_s = 3, 5.0
    limits = json.dumps({"*": {"requests": "3/5 seconds"}})
    env = fleet_env(
        redis_url,
        s3_server,
        fresh_simulator.url,
        PRISM_LLM_LIMITS=limits,
        PRISM_LIMITER_MAX_BLOCK_S="0.5",
        PRISM_CACHE="false",
    )
    start_worker(env)
    source = upload_input(s3_server, bucket, "in/limited.jsonl.gz", documents=6)
    run = prism_cli(
        ["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "limited", "--fresh"], env, tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    limited = read_run(s3_server, bucket, "limited")
    assert limited["manifest"]["counts"]["done"] == 6
    assert fresh_simulator.stats["429_limit"] == 0  # the provider never had to refuse
    starts = sorted(r["started_at"] for r in limited["results"])
    assert starts[-1] > starts[0]  # the jobs went out over several windows
    # Waits longer than 0.5 s were not spent holding a worker: the jobs came back later.
    assert max(r["finished_at"] for r in limited["results"]) > min(r["started_at"] for r in limited["results"])


def test_the_exporter_serves_fleet_metrics(tmp_path, fleet, s3_server, bucket):
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    from workers.testing import free_port_pair

    source = upload_input(s3_server, bucket, "in/metrics.jsonl.gz", documents=5)
    assert (
        prism_cli(
            ["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "metrics", "--fresh"], fleet, tmp_path
        ).returncode
        == 0
    )
    port = free_port_pair()
    exporter = subprocess.Popen(
        [str(Path(sys.executable).parent / "prism"), "exporter", "--port", str(port)], env=fleet, cwd=tmp_path
    )
    try:
        for _ in range(50):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.2)
        done = [
            line for line in text.splitlines() if line.startswith('prism_jobs_total{state="done",task="documents"}')
        ]
        assert done and float(done[0].split()[-1]) >= 5
        assert (
            'prism_queue_depth{queue="celery"}' in text
            and "prism_llm_tokens_total" in text
            and "prism_llm_usd_total" in text
        )
    finally:
        exporter.terminate()
        exporter.wait(10)


def test_lost_jobs_that_never_come_back_are_reported_not_waited_for(tmp_path, redis_url, s3_server, bucket):
    import subprocess
    import sys
    import time
    from pathlib import Path

    import redis

    env = fleet_env(redis_url, s3_server, None, PRISM_STALL_S="2", PRISM_MAX_REQUEUES="0")
    source = upload_input(s3_server, bucket, "in/lost.jsonl.gz", documents=4)
    cmd = [
        str(Path(sys.executable).parent / "prism"),
        "run",
        source,
        "--results",
        f"s3://{bucket}/prism",
        "--run-id",
        "lost",
    ]
    producer = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 60
    while queued(client) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    drop_queue(client)  # the messages are gone, and no worker will ever see them
    out, err = producer.communicate(timeout=120)
    assert producer.returncode == 1, err[-3000:]  # no query got a result: the run failed
    lost = read_run(s3_server, bucket, "lost")
    m = lost["manifest"]  # every query has an outcome (a failure saying why), none is left pending
    assert m["status"] == "failed" and m["counts"]["failed"] == 4 and m["counts"]["pending"] == 0
    assert all("no outcome after 0 requeue(s)" in f["error"] for f in lost["failures"])
