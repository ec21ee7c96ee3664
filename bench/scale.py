"""Scale-out: throughput with 1, 2 and 4 worker processes against a provider whose limits 4
workers cannot reach, as a share of the ideal (N times one worker's throughput).

Each worker is a prefork process of concurrency 2; the simulator answers in 0.5 s (the work is
waiting on the provider, as in production). Throughput counts jobs between the first start and
the last finish recorded in the results, so the producer's own start-up is left out.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime
from pathlib import Path

from _common import Fleet, document_lines, parser, report

from prism.datasets import parse_row
from prism.testing.simulator import Simulator, SimulatorConfig

JOBS_PER_WORKER, LATENCY_S, COUNTS = 60, 0.5, (1, 2, 4)
KEYS = ("scale2", "scale4", "jobs_per_s_1")


def throughput(run: dict) -> float:
    starts = [datetime.fromisoformat(r["started_at"]) for r in run["results"]]
    ends = [datetime.fromisoformat(r["finished_at"]) for r in run["results"]]
    return len(run["results"]) / (max(ends) - min(starts)).total_seconds()


def main() -> None:
    per_worker = 8 if parser(__doc__).parse_args().quick else JOBS_PER_WORKER
    lines = document_lines(per_worker * sum(COUNTS))
    # Limits far above what 4 workers can use: the fleet, not the provider, is measured.
    limits = json.dumps({"*": {"requests": "100000/minute", "tokens": "100000000/minute"}})
    config = SimulatorConfig(mode="oracle", latency_s=LATENCY_S, rpm=100_000, tpm=100_000_000)
    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp, Simulator(config) as sim:
        sim.add_queries(parse_row(line, i) for i, line in enumerate(lines, 1))
        with Fleet(sim, Path(tmp), PRISM_LLM_LIMITS=limits, PRISM_CACHE="false") as fleet:
            offset = 0
            for n in COUNTS:
                jobs = lines[offset : offset + per_worker * n]
                offset += len(jobs)
                source = fleet.upload(f"scale{n}.jsonl.gz", jobs)
                fleet.start_workers(n, concurrency=2)
                run = fleet.run(source, f"scale-{n}")
                fleet.stop_workers()
                assert run["manifest"]["counts"]["done"] == len(jobs), run["manifest"]["counts"]
                rates[n] = throughput(run)
                print(f"{n} worker(s): {len(jobs)} jobs, {rates[n]:.2f} jobs/s", flush=True)
    report(
        scale2=round(rates[2] / (2 * rates[1]), 3),
        scale4=round(rates[4] / (4 * rates[1]), 3),
        jobs_per_s_1=round(rates[1], 2),
        jobs_per_s_2=round(rates[2], 2),
        jobs_per_s_4=round(rates[4], 2),
    )


if __name__ == "__main__":
    main()
