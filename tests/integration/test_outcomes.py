"""Whatever raises, wherever: every query of a run ends in exactly one stored outcome, through
the embedded mode and through a real `celery worker` on Redis with results in S3. A fault is
injected at one stage of every job (PRISM_FAULT_AT); segments that fail still reach the
aggregation, which records the query as failed with the reason."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROWS_SAMPLE, fleet_env, prism_cli, read_run

pytestmark = pytest.mark.integration
SAMPLE = 12  # the bundled sample: 8 document queries and 4 chunk queries
# Which tasks each stage breaks: the others still end with results.
BROKEN = {
    "ranker": {"documents", "chunks"},
    "input": {"chunks"},
    "aggregate": {"chunks"},
    "store": {"documents", "chunks"},
}


def _check(manifest: dict, results: list[dict], failures: list[dict], stage: str) -> None:
    jobs = [f for f in failures if f["kind"] == "job"]
    outcomes = [(r["task"], r["query_id"]) for r in results] + [(f["task"], f["query_id"]) for f in jobs]
    assert len(outcomes) == len(set(outcomes)) == SAMPLE, (len(outcomes), manifest)
    assert {f["task"] for f in jobs} == BROKEN[stage]
    assert {r["task"] for r in results} == {"documents", "chunks"} - BROKEN[stage]
    assert all(f"fault injected at {stage}" in f["error"] for f in jobs), [f["error"] for f in jobs]
    expected = "failed" if BROKEN[stage] == {"documents", "chunks"} else "complete_with_failures"
    assert manifest["status"] == expected and manifest["counts"]["pending"] == 0


@pytest.mark.parametrize("stage", sorted(BROKEN))
def test_embedded_run_ends_with_one_outcome_per_query(stage, tmp_path):
    env = fleet_env(None, None, None, PRISM_FAULT_AT=stage, PRISM_STALL_S="20")
    done = prism_cli(
        ["run", str(ROWS_SAMPLE), "--results", str(tmp_path / "results"), "--run-id", "faulty"],
        env,
        tmp_path,
        timeout=120,
    )
    # every job failed: exit 1; some did: 3, so a scheduler running the night by exit code knows
    assert done.returncode == (1 if BROKEN[stage] == {"documents", "chunks"} else 3), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    base = tmp_path / "results" / "runs" / "faulty"

    def read(folder: str) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((base / folder).rglob("*.json"))]

    manifest = json.loads((base / "manifest.json").read_text())
    _check(manifest, read("results"), read("failures"), stage)


@pytest.mark.parametrize("stage", ["input", "store"])
def test_fleet_run_ends_with_one_outcome_per_query(stage, tmp_path, redis_url, s3_server, bucket, start_worker):
    env = fleet_env(redis_url, s3_server, None, PRISM_STALL_S="20")
    start_worker(env | {"PRISM_FAULT_AT": stage})
    results = f"s3://{bucket}/prism"
    done = prism_cli(
        ["run", str(ROWS_SAMPLE), "--results", results, "--run-id", f"faulty-{stage}"], env, Path(tmp_path), timeout=180
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    run = read_run(s3_server, bucket, f"faulty-{stage}")
    _check(run["manifest"], run["results"], run["failures"], stage)


def test_a_run_whose_planning_fails_is_recorded_failed(tmp_path):
    prior = tmp_path / "prior"
    prior.mkdir()
    (prior / "prior.json").write_text("{}")  # not a prior model: loading it fails
    env = fleet_env(None, None, None, PRISM_DOC_PRIOR=str(prior))
    done = prism_cli(
        ["run", str(ROWS_SAMPLE), "--results", str(tmp_path / "results"), "--run-id", "bad-prior"], env, tmp_path
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("fault", ["400", "malformed"])
def test_llm_faults_end_in_one_outcome_per_query(fault, tmp_path, fresh_simulator):
    """A provider that refuses every request: each query fails with the provider's reason. One
    whose replies never parse: each query is ranked by the fallback, flagged."""
    fresh_simulator.config.fault_rates = {fault: 1.0}
    env = fleet_env(None, None, fresh_simulator.url, PRISM_CHUNK_RANKER="llm", PRISM_CACHE="false")
    results = tmp_path / "results"
    done = prism_cli(
        ["run", str(ROWS_SAMPLE), "--results", str(results), "--run-id", "llm-faults"], env, tmp_path, timeout=180
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    base = results / "runs" / "llm-faults"
    manifest = json.loads((base / "manifest.json").read_text())
    outcomes = [
        json.loads(p.read_text()) for folder in ("results", "failures") for p in (base / folder).rglob("*.json")
    ]
    assert len({(o["task"], o["query_id"]) for o in outcomes}) == len(outcomes) == SAMPLE
    if fault == "400":
        assert manifest["status"] == "failed" and done.returncode == 1
        assert all("HTTP 400" in o["error"] and o["calls"] for o in outcomes), outcomes[0]
    else:
        assert manifest["status"] == "complete" and done.returncode == 0
        assert all("fallback" in o["ranking"]["flags"] for o in outcomes)


def test_a_killed_producer_leaves_a_run_the_next_status_calls_interrupted(tmp_path, fresh_simulator):
    fresh_simulator.config.latency_s = 2.0
    env = fleet_env(None, None, fresh_simulator.url, PRISM_CHUNK_RANKER="llm", PRISM_CACHE="false")
    results = tmp_path / "results"
    cmd = [str(Path(sys.executable).parent / "prism"), "run", "--results", str(results), "--run-id", "killed"]
    producer = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest_path = results / "runs" / "killed" / "manifest.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if manifest_path.exists() and json.loads(manifest_path.read_text())["status"] == "running":
            break
        time.sleep(0.2)
    producer.send_signal(signal.SIGKILL)
    producer.wait(10)
    assert json.loads(manifest_path.read_text())["status"] == "running"
    status = prism_cli(["status", "killed", "--results", str(results)], env, tmp_path, timeout=60)
    assert status.returncode == 0 and "interrupted" in status.stdout, status.stdout + status.stderr
    manifest = json.loads(manifest_path.read_text())
    assert manifest["status"] == "interrupted" and manifest["counts"]["pending"] > 0
    assert (results / "runs" / "killed" / "report.md").exists()
    # A report written later keeps it interrupted (until a resume), with the same end and wall time.
    again = prism_cli(["report", "killed", "--results", str(results)], env, tmp_path, timeout=60)
    assert again.returncode == 0, again.stderr
    reported = json.loads(manifest_path.read_text())
    assert reported["status"] == "interrupted" and reported["counts"]["pending"] > 0
    assert (reported["finished_at"], reported["timings"]) == (manifest["finished_at"], manifest["timings"])
    # and a resume finishes it
    resumed = prism_cli(["resume", "killed", "--results", str(results)], env, tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(manifest_path.read_text())["status"] == "complete"


def test_failed_jobs_end_the_run_with_failures_and_resume_failed_runs_them_again(tmp_path):
    results = tmp_path / "results"
    base = results / "runs" / "night"
    run = ["run", str(ROWS_SAMPLE), "--results", str(results), "--run-id", "night"]
    broken = prism_cli(run, fleet_env(None, None, None, PRISM_FAULT_AT="aggregate"), tmp_path, timeout=120)
    assert broken.returncode == 3, broken.stderr[-2000:]
    assert json.loads((base / "manifest.json").read_text())["status"] == "complete_with_failures"
    # the same run id again keeps its failures, and says so
    again = prism_cli(run, fleet_env(None, None, None), tmp_path, timeout=120)
    out = again.stdout + again.stderr
    assert again.returncode == 3 and "4 failed job(s) of this run kept as failed" in out, out[-2000:]
    resumed = prism_cli(
        ["resume", "night", "--failed", "--results", str(results)], fleet_env(None, None, None), tmp_path, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    manifest = json.loads((base / "manifest.json").read_text())
    assert (
        manifest["status"] == "complete" and manifest["counts"]["done"] == SAMPLE and manifest["counts"]["failed"] == 0
    )
    assert not list((base / "failures").rglob("*.json"))
