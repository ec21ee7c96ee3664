"""Shared by the benchmarks: the shared data, a Redis DB of the benchmarks' own, the S3 server
(one of their own, or the one a CI lane shares: PRISM_BENCH_S3), `--quick`, and the exit codes
of a run that ended."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("PRISM_SHARED_DATA", ROOT.parent / "shared" / "data"))
DOC_DEV = SHARED / "finagentbench" / "document_ranking_kaggle_dev.jsonl"
PAGES = SHARED / "financebench" / "financebench_page_ranking.jsonl.gz"

from prism.datasets import load_queries as load  # noqa: E402, F401 - for the benchmarks, after the path is set

# `prism run` and `prism resume` exit with the run's status (prism.models.EXIT_CODES): these end a
# run, with every job's outcome stored; any other code is a crash of the benchmark's run.
ENDED = {0: "complete", 3: "complete_with_failures"}


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The benchmark's flags, `--quick` among them: the same code path at a small size (CI)."""
    found = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    found.add_argument("--quick", action="store_true", help="the same code path at a small size, in about 20 s")
    return found


def ended(done: subprocess.CompletedProcess, what: str = "prism run") -> subprocess.CompletedProcess:
    """A command whose run ended (complete, or with failures it records); else stop, saying why."""
    if done.returncode not in ENDED:
        raise SystemExit(f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done


def s3_server(workdir: Path):
    """The S3 server: the one PRISM_BENCH_S3 names (shared by a CI lane), else one of our own."""
    from workers.testing import SeaweedS3

    if endpoint := os.environ.get("PRISM_BENCH_S3"):
        return SeaweedS3.running(endpoint)
    return SeaweedS3(workdir)


def redis_db(db: int = 12) -> str:
    """A clean Redis DB for the benchmark; Redis must answer on 127.0.0.1:6379."""
    url = f"redis://127.0.0.1:6379/{db}"
    client = redis.Redis.from_url(url)
    client.ping()
    client.flushdb()
    return url


def report(**figures) -> None:
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()), flush=True)


class Fleet:
    """The fleet on loopback for a benchmark: an S3 server, a Redis DB of its own, the simulator,
    and `celery worker` processes started on demand; `run` is `prism run` against them."""

    def __init__(self, simulator, workdir: Path, redis_db_index: int = 12, **env):
        from workers.testing import fleet_env

        self.workdir, self.simulator = workdir, simulator
        workdir.mkdir(parents=True, exist_ok=True)
        self.s3 = s3_server(workdir / "s3")
        self.bucket = self.s3.bucket()
        self.redis_url = redis_db(redis_db_index)
        self.env = fleet_env(self.redis_url, self.s3.endpoint, simulator.url, **env)
        self.workers = []

    def start_workers(self, n: int, concurrency: int = 1, pool: str = "prefork", **env) -> None:
        from workers.testing import WorkerProcess

        for _i in range(n):
            log = self.workdir / f"worker-{len(self.workers)}.log"
            self.workers.append(WorkerProcess(self.env | env, log, concurrency=concurrency, pool=pool))

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def upload(self, name: str, lines: list[str]) -> str:
        import gzip

        self.s3.client().put_object(Bucket=self.bucket, Key=f"in/{name}", Body=gzip.compress("".join(lines).encode()))
        return f"s3://{self.bucket}/in/{name}"

    def run(self, source: str, run_id: str, *args: str, **env) -> dict:
        """`prism run`; its manifest, cost report and results, and its wall time."""
        import json
        import time

        from workers.testing import prism_cli

        started = time.monotonic()
        done = prism_cli(
            ["run", source, "--results", f"s3://{self.bucket}/prism", "--run-id", run_id, *args],
            self.env | env,
            self.workdir,
        )
        wall = time.monotonic() - started
        ended(done)
        client, base = self.s3.client(), f"prism/runs/{run_id}"

        def get(key):
            return json.loads(client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

        pages = client.get_paginator("list_objects_v2")

        def keys(sub):
            return [
                o["Key"]
                for p in pages.paginate(Bucket=self.bucket, Prefix=f"{base}/{sub}/")
                for o in p.get("Contents", [])
            ]

        return {
            "wall_s": wall,
            "manifest": get(f"{base}/manifest.json"),
            "cost": get(f"{base}/cost.json"),
            "results": [get(k) for k in keys("results")],
            "spent": keys("spent"),
        }

    def close(self) -> None:
        self.stop_workers()
        self.s3.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def document_lines(n: int) -> list[str]:
    """n distinct document rows: the training-scale file, then FinanceBench's document rows."""
    full = SHARED / "finagentbench" / "document_ranking_kaggle_dev_full.jsonl"
    extra = SHARED / "financebench" / "financebench_document_ranking.jsonl"
    lines = full.read_text().splitlines(keepends=True) + extra.read_text().splitlines(keepends=True)
    assert n <= len(lines), f"only {len(lines)} document rows"
    return lines[:n]
