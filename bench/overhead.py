"""Fleet overhead: what a job costs in time for going through the fleet.

All 296 document rows and 20 page-ranking rows are ranked twice against the oracle simulator
at zero latency: once directly in this process (the same rankers and gateway, no broker, no
store: the baseline), once by `prism run` through Redis, 2 `celery worker` processes and the
S3 server. Overhead per job = (fleet wall time x 2 workers - baseline wall time) / jobs: the
worker time each job spends on the broker, messages, chords and result writes. Lost = planned
jobs with neither a result nor a failure record.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from pathlib import Path

from _common import DOC_DEV, PAGES, ended, load, parser, redis_db, report, s3_server

from prism.llm import Gateway
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig
from prism.ranking.rankers import build_ranker
from prism.ranking.strategies.chunks import prepare, rank_chunks
from prism.segmenting import TokenCounter
from prism.testing.simulator import Simulator, SimulatorConfig
from workers.testing import WorkerProcess, fleet_env, prism_cli

WORKERS = 2
KEYS = ("jobs", "lost", "failed", "overhead_ms_per_job", "fleet_jobs_per_s")


def baseline(sim: Simulator, documents, pages) -> float:
    config = RunConfig(doc_ranker="llm", chunk_ranker="llm")
    gateway = Gateway(Endpoint(base_url=sim.url, api_key="sk-bench"), PriceTable.load(), RetryPolicy())
    docs, segs, rerank = (build_ranker(config, stage, gateway) for stage in ("documents", "segments", "rerank"))
    counter = TokenCounter()
    started = time.monotonic()
    for q in documents:
        docs.rank(q.question, q.candidates, 5)
    for q in pages:
        rank_chunks(
            segs,
            rerank,
            prepare(q.question, q.candidates, counter, config.segment_tokens),
            5,
            10,
            config.segment_tokens,
        )
    return time.monotonic() - started


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    documents, pages = load(DOC_DEV, limit=30 if quick else None), load(PAGES, limit=3 if quick else 20)
    jobs = len(documents) + len(pages)
    with tempfile.TemporaryDirectory() as tmp, Simulator(SimulatorConfig(mode="oracle")) as sim:
        tmp = Path(tmp)
        sim.add_queries(documents + pages)
        direct_s = baseline(sim, documents, pages)
        print(f"baseline: {jobs} jobs in one process in {direct_s:.1f} s", flush=True)

        s3 = s3_server(tmp / "s3")
        workers = []
        try:
            bucket = s3.bucket()
            with gzip.open(PAGES, "rt") as f:
                page_lines = [next(f) for _ in range(len(pages))]
            document_lines = DOC_DEV.read_text().splitlines(keepends=True)[: len(documents)]
            body = gzip.compress(("".join(document_lines) + "".join(page_lines)).encode())
            s3.client().put_object(Bucket=bucket, Key="in/overhead.jsonl.gz", Body=body)
            env = fleet_env(redis_db(), s3.endpoint, sim.url)
            workers = [WorkerProcess(env, tmp / f"worker{i}.log", concurrency=1) for i in range(WORKERS)]
            started = time.monotonic()
            run = prism_cli(
                [
                    "run",
                    f"s3://{bucket}/in/overhead.jsonl.gz",
                    "--results",
                    f"s3://{bucket}/prism",
                    "--run-id",
                    "overhead",
                ],
                env,
                tmp,
            )
            fleet_s = time.monotonic() - started
            ended(run)
            manifest = json.loads(
                s3.client().get_object(Bucket=bucket, Key="prism/runs/overhead/manifest.json")["Body"].read()
            )
        finally:
            for w in workers:
                w.stop()
            s3.stop()
    counts = manifest["counts"]
    lost = counts["documents"] + counts["chunks"] - counts["done"] - counts["failed"]
    print(
        f"fleet: {counts['done']} done, {counts['failed']} failed in {fleet_s:.1f} s with {WORKERS} workers", flush=True
    )
    report(
        jobs=jobs,
        lost=lost,
        failed=counts["failed"],
        direct_s=round(direct_s, 2),
        fleet_s=round(fleet_s, 2),
        overhead_ms_per_job=round(1000 * (fleet_s * WORKERS - direct_s) / jobs, 1),
        fleet_jobs_per_s=round(counts["done"] / fleet_s, 2),
    )


if __name__ == "__main__":
    main()
