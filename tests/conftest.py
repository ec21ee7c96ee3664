"""Real services for the tests: Redis on 127.0.0.1:6379 (a DB index of our own, emptied before
and after), an S3 server (SeaweedFS) on loopback, the provider simulator over HTTP, and real
`celery worker` processes."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import redis

from prism.datasets import load_queries as load
from prism.testing.simulator import Simulator, SimulatorConfig
from producer.prompt_check import CHECK_NAME
from workers.testing import S3_KEYS, SeaweedS3, WorkerProcess, fleet_env, prism_cli, s3_client  # noqa: F401 - for tests

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PRISM_SHARED_DATA", ROOT.parent / "shared" / "data"))
DOC_DEV = SHARED / "finagentbench" / "document_ranking_kaggle_dev.jsonl"
DOC_FULL = SHARED / "finagentbench" / "document_ranking_kaggle_dev_full.jsonl"
PAGES = SHARED / "financebench" / "financebench_page_ranking.jsonl.gz"
ROWS_SAMPLE = ROOT / "prism" / "data" / "sample.jsonl.gz"  # the bundled benchmark rows (make run-rows)


def check_calls(cost: dict) -> int:
    """The calls of a run's system-prompt check in its cost.json (0 where it used a kept one)."""
    return sum(job["calls"] for job in cost["jobs"] if job["query_id"] == CHECK_NAME)


# Parallel test processes (pytest -n) each take the next DB index, so none flushes another's queue.
XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
REDIS_DB = int(os.environ.get("PRISM_TEST_REDIS_DB", "11")) + XDIST_WORKER


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = f"redis://127.0.0.1:6379/{REDIS_DB}"
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail("Redis is not answering on 127.0.0.1:6379; start it (see .ci/run)")
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """SeaweedFS on loopback with auth on; yields its endpoint URL."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed"))
    yield server.endpoint
    server.stop()


@pytest.fixture()
def bucket(s3_server) -> str:
    name = f"prism-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def simulator():
    with Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(load(DOC_DEV))
        sim.add_queries(load(PAGES, limit=12))
        yield sim


@pytest.fixture()
def fresh_simulator(simulator):
    """The module's simulator, reset to the oracle mode with no noise, no faults and no outage."""
    simulator.config = SimulatorConfig(mode="oracle")
    simulator._script.clear()
    simulator.outage(0)
    simulator.clear_caches()
    return simulator


@pytest.fixture()
def start_worker(tmp_path):
    started: list[WorkerProcess] = []

    def start(env: dict[str, str], concurrency: int = 2) -> WorkerProcess:
        worker = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log", concurrency)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def read_run(endpoint: str, bucket: str, run_id: str, prefix: str = "prism") -> dict:
    """Everything a run stored in S3: manifest, cost, results, failures, spent records."""
    import json

    client = s3_client(endpoint)
    base = f"{prefix}/runs/{run_id}"

    def keys(sub: str) -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{base}/{sub}/")
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def get(key: str):
        return json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    return {
        "manifest": get(f"{base}/manifest.json"),
        "cost": get(f"{base}/cost.json"),
        "results": [get(k) for k in keys("results")],
        "failures": [get(k) for k in keys("failures")],
        "spent": [get(k) for k in keys("spent")],
    }


def upload_input(endpoint: str, bucket: str, key: str, documents: int = 0, pages: int = 0, extra: str = "") -> str:
    """Put the first ``documents`` document rows and ``pages`` page rows (gzipped) in S3."""
    import gzip

    lines = DOC_DEV.read_text().splitlines(keepends=True)[:documents]
    if pages:
        with gzip.open(PAGES, "rt") as f:
            lines += [next(f) for _ in range(pages)]
    s3_client(endpoint).put_object(Bucket=bucket, Key=key, Body=gzip.compress(("".join(lines) + extra).encode()))
    return f"s3://{bucket}/{key}"
