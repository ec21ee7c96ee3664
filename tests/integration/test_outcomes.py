"""Whatever raises, wherever: every query of a run ends in exactly one stored outcome, through
the embedded mode and through a real `celery worker` on Redis with results in S3. A fault is
injected at one stage of every job (PRISM_FAULT_AT); segments that fail still reach the
aggregation, which records the query as failed with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import fleet_env, prism_cli, read_run

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
    expected = "failed" if BROKEN[stage] == {"documents", "chunks"} else "complete"
    assert manifest["status"] == expected and manifest["counts"]["pending"] == 0


@pytest.mark.parametrize("stage", sorted(BROKEN))
def test_embedded_run_ends_with_one_outcome_per_query(stage, tmp_path):
    env = fleet_env(None, None, None, PRISM_FAULT_AT=stage, PRISM_STALL_S="20")
    done = prism_cli(["run", "--results", str(tmp_path / "results"), "--run-id", "faulty"], env, tmp_path, timeout=120)
    assert done.returncode == (1 if BROKEN[stage] == {"documents", "chunks"} else 0), done.stderr[-2000:]
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
    done = prism_cli(["run", "--results", results, "--run-id", f"faulty-{stage}"], env, Path(tmp_path), timeout=180)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    run = read_run(s3_server, bucket, f"faulty-{stage}")
    _check(run["manifest"], run["results"], run["failures"], stage)


def test_a_run_whose_planning_fails_is_recorded_failed(tmp_path):
    prior = tmp_path / "prior"
    prior.mkdir()
    (prior / "prior.json").write_text("{}")  # not a prior model: loading it fails
    env = fleet_env(None, None, None, PRISM_DOC_PRIOR=str(prior))
    done = prism_cli(["run", "--results", str(tmp_path / "results"), "--run-id", "bad-prior"], env, tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
