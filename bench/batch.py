"""The Batch API against online calls: the same small workload ranked online (standard tier, no
response cache) and with ``--via batch``, through one worker on the same simulator.

Printed: each run's USD, calls, tokens and wall time, whether the rankings agree; last line
``batch_usd_ratio`` (batch USD over online USD; the provider bills half), ``lost`` (planned
queries with no outcome, in either run) and ``failed`` (failed jobs, in either run).
``measure`` is what a nightly benchmark calls with its own fleet.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from _common import DOC_DEV, PAGES, Fleet, load, parser, report

from prism.testing.batches import BatchConfig
from prism.testing.simulator import Simulator, SimulatorConfig

DOCUMENTS, PAGE_ROWS = 20, 2
BATCH_ENV = {"PRISM_BATCH_POLL_S": "0.5", "PRISM_BATCH_GATHER_S": "1"}
KEYS = ("batch_usd_ratio", "lost", "failed")


def _outcomes(run: dict) -> tuple[int, int]:
    """(lost, failed) of one run: queries planned without any outcome, and failed jobs."""
    counts = run["manifest"]["counts"]
    planned = counts.get("documents", 0) + counts.get("chunks", 0)
    return planned - counts.get("done", 0) - counts.get("failed", 0), counts.get("failed", 0)


def measure(fleet: Fleet, source: str, prefix: str = "batch") -> dict:
    """Online, then via batch, over ``source``; the figures of both."""
    fleet.stop_workers()
    fleet.start_workers(1, concurrency=2, PRISM_CACHE="false")
    online = fleet.run(source, f"{prefix}-online", "--fresh", PRISM_CACHE="false")
    fleet.stop_workers()
    fleet.start_workers(1, concurrency=2, **BATCH_ENV)
    batched = fleet.run(source, f"{prefix}-via-batch", "--fresh", "--via", "batch", **BATCH_ENV)
    fleet.stop_workers()
    for name, run in (("online", online), ("batch", batched)):
        total = run["cost"]["total"]
        print(
            f"{name}: {run['wall_s']:.1f} s, {total['calls']} calls, {total['prompt_tokens']} prompt + "
            f"{total['completion_tokens']} completion tokens, USD {float(total['usd']):.6f}",
            flush=True,
        )
    rankings = [{r["query_id"]: r["ranking"]["indices"] for r in run["results"]} for run in (online, batched)]
    (lost_a, failed_a), (lost_b, failed_b) = _outcomes(online), _outcomes(batched)
    online_usd, batch_usd = float(online["cost"]["total"]["usd"]), float(batched["cost"]["total"]["usd"])
    return {
        "batch_usd_ratio": round(batch_usd / online_usd, 4) if online_usd else float("nan"),
        "rankings_equal": int(rankings[0] == rankings[1]),
        "online_usd": online_usd,
        "batch_usd": batch_usd,
        "batch_wall_s": round(batched["wall_s"], 1),
        "online_wall_s": round(online["wall_s"], 1),
        "lost": lost_a + lost_b,
        "failed": failed_a + failed_b,
    }


def main() -> None:
    documents, pages = (6, 1) if parser(__doc__).parse_args().quick else (DOCUMENTS, PAGE_ROWS)
    with gzip.open(PAGES, "rt") as f:
        lines = DOC_DEV.read_text().splitlines(keepends=True)[:documents] + [next(f) for _ in range(pages)]
    with tempfile.TemporaryDirectory() as tmp, Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(load(DOC_DEV) + load(PAGES, limit=pages))
        sim.batch.config = BatchConfig(validate_s=0.2, process_s=2.0, finalize_s=0.2)
        with Fleet(sim, Path(tmp), redis_db_index=8) as fleet:
            figures = measure(fleet, fleet.upload("batch.jsonl.gz", lines))
    print(" ".join(f"{k}={v}" for k, v in figures.items() if k not in ("batch_usd_ratio", "lost", "failed")))
    report(batch_usd_ratio=figures["batch_usd_ratio"], lost=figures["lost"], failed=figures["failed"])


if __name__ == "__main__":
    main()
