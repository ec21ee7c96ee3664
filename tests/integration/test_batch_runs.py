"""`prism run --via batch` through a real `celery worker` on Redis, results in S3 and the
simulator's Batch API: half price and the same rankings as online; failed, expired and cancelled
lines retried; a batch with no output file; a producer killed mid-batch and resumed. Every
answered line is paid once, never at $0 and never twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import openai
import pytest

from prism.llm.pricing import PriceTable
from prism.models import Usage
from prism.testing.batches import BatchConfig
from prism.testing.simulator import Simulator, SimulatorConfig
from tests.conftest import DOC_DEV, PAGES, fleet_env, load, prism_cli, read_run, s3_client, upload_input
from workers.testing import RedisServer

pytestmark = pytest.mark.integration
PRICES = PriceTable.load()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A Redis of this module's own: jobs that wait for batches are put back on the queue for
    seconds at a time, and no other worker on a shared Redis may take them."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server.url
    server.stop()


@pytest.fixture()
def sim():
    """A simulator of its own per test: its own endpoint, so no test answers another's requests
    from the response cache. No provider prompt cache: these runs compare the tiers alone."""
    with Simulator(SimulatorConfig(mode="oracle", cache=None)) as s:
        s.add_queries(load(DOC_DEV, limit=10))
        s.add_queries(load(PAGES, limit=4))
        s.batch.config = BatchConfig(validate_s=0.1, process_s=0.8, finalize_s=0.1, cancel_s=0.1)
        yield s


def _env(broker: str, s3: str, sim: Simulator, **extra: str) -> dict[str, str]:
    # These runs count every request the provider answers, batch against online: no check first.
    given = {
        "PRISM_BATCH_POLL_S": "0.3",
        "PRISM_BATCH_GATHER_S": "2.0",  # a small run's requests all reach its first batch, however busy the machine
        "PRISM_STALL_S": "60",
        "PRISM_CHECK_SYSTEM_PROMPT": "false",
    }
    return fleet_env(broker, s3, sim.url, **(given | extra))


def _run(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    done = prism_cli(args, env, cwd, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return done


def _calls(run: dict) -> list[dict]:
    holders = [*run["results"], *run["spent"], *[f for f in run["failures"] if f["kind"] == "job"]]
    return [c for h in holders for c in h["calls"]]


def _complete(run: dict, queries: int) -> None:
    ids = [r["query_id"] for r in run["results"]]
    assert len(ids) == len(set(ids)) == queries, (ids, run["failures"])
    assert run["manifest"]["status"] == "complete" and run["manifest"]["config"]["via"] == "batch"


def _answered_once(run: dict, sim: Simulator) -> list[dict]:
    """Every line the simulator answered is one paid batch call, at half the standard price."""
    answered = [c for b in sim.batch.batches.values() for c in b.done]
    assert len(answered) == len(set(answered)), "a request was answered in two batches"
    paid = [c for c in _calls(run) if c["tier"] == "batch" and c["error"] is None]
    assert len(paid) == len(answered)
    for call in paid:
        usage = Usage.model_validate(call["usage"])
        standard = PRICES.usd(call["model"], usage)
        assert usage.prompt_tokens > 0 and standard and Decimal(call["usd"]) == standard / 2 > 0
    return paid


def _batch_records(s3: str, bucket: str, run_id: str) -> list[dict]:
    client = s3_client(s3)
    page = client.list_objects_v2(Bucket=bucket, Prefix=f"prism/runs/{run_id}/batch/batches/")
    return [json.loads(client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()) for o in page.get("Contents", [])]


def test_a_batch_run_costs_half_and_ranks_as_the_online_run(tmp_path, broker, s3_server, bucket, sim, start_worker):
    source = upload_input(s3_server, bucket, "in/half.jsonl.gz", documents=4, pages=2)
    results = f"s3://{bucket}/prism"
    worker = start_worker(_env(broker, s3_server, sim))
    done = _run(
        ["run", source, "--results", results, "--run-id", "via-batch", "--via", "batch"],
        _env(broker, s3_server, sim),
        tmp_path,
    )
    assert "batches:" in done.stderr  # the progress line shows the batches
    worker.stop()
    # Online, on the same simulator, with no response cache and no reuse of the batch run's results.
    online_env = _env(broker, s3_server, sim, PRISM_CACHE="false")
    start_worker(online_env)
    _run(["run", source, "--results", results, "--run-id", "online", "--fresh"], online_env, tmp_path)

    batch_run, online_run = read_run(s3_server, bucket, "via-batch"), read_run(s3_server, bucket, "online")
    _complete(batch_run, 6)
    rankings = {r["query_id"]: r["ranking"]["indices"] for r in batch_run["results"]}
    assert rankings == {r["query_id"]: r["ranking"]["indices"] for r in online_run["results"]}
    paid = _answered_once(batch_run, sim)
    # Two stages went through the Batch API: documents and segments, then the pool re-ranks.
    assert {c["stage"] for c in paid} == {"documents", "segments", "rerank"}
    assert len(_batch_records(s3_server, bucket, "via-batch")) >= 2
    b, o = batch_run["cost"]["total"], online_run["cost"]["total"]
    assert b["calls"] == o["calls"] == len(paid) and b["cached_calls"] == 0 and b["unpriced_calls"] == 0
    assert (b["prompt_tokens"], b["completion_tokens"]) == (o["prompt_tokens"], o["completion_tokens"])
    assert Decimal(b["usd"]) * 2 == Decimal(o["usd"]) > 0
    # The tier's saving is the half not paid, priced from the batch lines' usage.
    levers = batch_run["cost"]["savings_by_lever"]
    assert Decimal(levers["service_tier_usd"]) == Decimal(b["usd"])
    assert Decimal(o["tier_saved_usd"]) == 0
    jobs = {(j["task"], j["query_id"]): Decimal(j["usd"]) for j in batch_run["cost"]["jobs"]}
    assert len(jobs) == 6 and all(usd > 0 for usd in jobs.values())  # each job's lines are its own


def test_failed_and_expired_lines_are_retried_and_recorded(tmp_path, broker, s3_server, bucket, sim, start_worker):
    # Scripted, not drawn: which lines share a batch depends on timing across the workers.
    sim.batch.config.line_faults = ["server_error", "batch_expired", "server_error"]
    source = upload_input(s3_server, bucket, "in/fail.jsonl.gz", documents=3, pages=1)
    env = _env(broker, s3_server, sim, PRISM_BATCH_MAX_TRIES="6")
    start_worker(env)
    _run(["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "lines", "--via", "batch"], env, tmp_path)
    run = read_run(s3_server, bucket, "lines")
    _complete(run, 4)
    _answered_once(run, sim)
    failed = [f for b in sim.batch.batches.values() for f in b.failed.values()]
    assert sorted(f["error"]["code"] for f in failed) == ["batch_expired", "server_error", "server_error"]
    assert any(b.status == "expired" for b in sim.batch.batches.values())
    recorded = [c for c in _calls(run) if c["error"]]
    assert len(recorded) == len(failed) == run["cost"]["total"]["failed_calls"]
    assert all(c["usd"] == "0" and c["tier"] == "batch" for c in recorded)  # tried, not billed
    assert {"batch_expired", "server_error"} == {c["error"].split(": ")[1] for c in recorded}


def test_a_batch_cancelled_mid_run_keeps_its_answers_and_sends_the_rest_again(
    tmp_path, broker, s3_server, bucket, sim, start_worker
):
    sim.batch.config.process_s = 3.0
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0)
    cancelled: list[str] = []

    def cancel_the_first_batch_midway() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # The first batch of several lines: one that ends with some answered and some not.
            first = next((b for b in sim.batch.batches.values() if len(b.lines) >= 3), None)
            if first is not None and client.batches.retrieve(first.id).request_counts.completed >= 2:
                client.batches.cancel(first.id)
                cancelled.append(first.id)
                sim.batch.config.process_s = 0.8
                return
            time.sleep(0.05)

    canceller = threading.Thread(target=cancel_the_first_batch_midway, daemon=True)
    canceller.start()
    source = upload_input(s3_server, bucket, "in/cancel.jsonl.gz", documents=3, pages=1)
    env = _env(broker, s3_server, sim, PRISM_BATCH_GATHER_S="5")  # the run's requests in one batch
    start_worker(env)
    _run(["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "cancel", "--via", "batch"], env, tmp_path)
    canceller.join(5)
    run = read_run(s3_server, bucket, "cancel")
    _complete(run, 4)
    _answered_once(run, sim)
    (first,) = cancelled
    kept = sim.batch.batches[first]
    assert kept.status == "cancelled" and 2 <= len(kept.done) < len(kept.lines)
    records = {r["id"]: r for r in _batch_records(s3_server, bucket, "cancel")}
    assert records[first]["status"] == "cancelled" and records[first]["ingested"]
    rest = {line["custom_id"] for line in kept.lines} - set(kept.done)
    later = {c for b in sim.batch.batches.values() if b.id != first for c in b.done}
    assert rest <= later  # the lines the cancel stopped went in a later batch


def test_a_batch_with_every_line_failed_and_no_output_file(tmp_path, broker, s3_server, bucket, sim, start_worker):
    sim.batch.config.fail_batches = 1
    source = upload_input(s3_server, bucket, "in/empty.jsonl.gz", documents=3)
    env = _env(broker, s3_server, sim)
    start_worker(env)
    _run(["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "no-output", "--via", "batch"], env, tmp_path)
    run = read_run(s3_server, bucket, "no-output")
    _complete(run, 3)
    _answered_once(run, sim)
    records = sorted(_batch_records(s3_server, bucket, "no-output"), key=lambda r: r["submitted_at"])
    assert records[0]["status"] == "completed" and records[0]["output_file_id"] is None
    assert records[0]["error_file_id"] and len(records) == 2
    assert run["cost"]["total"]["failed_calls"] == len(records[0]["lines"]) == 3


def test_requests_go_online_after_their_last_try_in_a_batch(tmp_path, broker, s3_server, bucket, sim, start_worker):
    sim.batch.config.fail_batches = 2
    source = upload_input(s3_server, bucket, "in/online.jsonl.gz", documents=3)
    env = _env(broker, s3_server, sim, PRISM_BATCH_MAX_TRIES="2")
    start_worker(env)
    _run(["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "fallback", "--via", "batch"], env, tmp_path)
    run = read_run(s3_server, bucket, "fallback")
    _complete(run, 3)
    calls = _calls(run)
    online = [c for c in calls if c["tier"] == "standard" and not c["cached"]]
    assert len(online) == 3 and all(Decimal(c["usd"]) > 0 for c in online)
    assert len([c for c in calls if c["error"]]) == 6 and len(sim.batch.batches) == 2


def test_a_killed_producer_resumes_polling_its_batches(tmp_path, broker, s3_server, bucket, sim, start_worker):
    sim.batch.config.process_s = 4.0
    source = upload_input(s3_server, bucket, "in/resume.jsonl.gz", documents=3, pages=1)
    env = _env(broker, s3_server, sim)
    start_worker(env)
    results = f"s3://{bucket}/prism"
    args = ["run", source, "--results", results, "--run-id", "resumed", "--via", "batch"]
    producer = subprocess.Popen(
        [str(Path(sys.executable).parent / "prism"), *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not _batch_records(s3_server, bucket, "resumed"):
        assert time.monotonic() < deadline and producer.poll() is None
        time.sleep(0.1)
    producer.send_signal(signal.SIGKILL)
    producer.communicate(timeout=30)
    # The fleet goes on after the producer died (it submits and polls the batches): a request
    # that came after the first batch went (a loaded machine) is in a later one, never again in
    # this one, so the first is the one to follow, not the only one there may be.
    submitted = min(_batch_records(s3_server, bucket, "resumed"), key=lambda r: r["submitted_at"])
    assert submitted["status"] != "completed" and submitted["id"] in sim.batch.batches
    status = _run(["status", "resumed", "--results", results], env, tmp_path)
    assert "open (" in status.stdout and submitted["id"] in status.stdout
    sim.batch.config.process_s = 0.8
    _run(["resume", "resumed", "--results", results], env, tmp_path)
    run = read_run(s3_server, bucket, "resumed")
    _complete(run, 4)
    _answered_once(run, sim)  # the killed producer's batch was polled, not submitted again
    records = {r["id"]: r for r in _batch_records(s3_server, bucket, "resumed")}
    assert records[submitted["id"]]["ingested"] and records[submitted["id"]]["status"] == "completed"
    lines = [line["custom_id"] for b in sim.batch.batches.values() for line in b.lines]
    assert len(lines) == len(set(lines))


def test_a_batch_run_enqueued_without_waiting_is_driven_by_the_fleet(
    tmp_path, broker, s3_server, bucket, sim, start_worker
):
    """No producer after `prism enqueue --via batch`: the workers that wait on the batches submit,
    poll and take them in (one at a time, by the run's tick lock), and the run ends complete."""
    source = upload_input(s3_server, bucket, "in/nowait.jsonl.gz", documents=3, pages=1)
    env = _env(broker, s3_server, sim)
    start_worker(env, concurrency=2)
    start_worker(env, concurrency=2)  # two workers: the lock keeps them from submitting twice
    results = f"s3://{bucket}/prism"
    queued = _run(["enqueue", source, "--results", results, "--run-id", "nowait", "--via", "batch"], env, tmp_path)
    assert queued.stdout.strip() == "nowait"
    client, deadline = s3_client(s3_server), time.monotonic() + 180
    while client.list_objects_v2(Bucket=bucket, Prefix="prism/runs/nowait/results/").get("KeyCount", 0) < 4:
        assert time.monotonic() < deadline, "the fleet did not finish the batch run on its own"
        time.sleep(1)
    _run(["report", "nowait", "--results", results], env, tmp_path)
    run = read_run(s3_server, bucket, "nowait")
    _complete(run, 4)
    _answered_once(run, sim)
    assert sim.batch.batches and all(r["ingested"] for r in _batch_records(s3_server, bucket, "nowait"))
