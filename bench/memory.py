"""Worker memory over a long run: resident memory of a worker's pool process after 5,000
document jobs over the same after 100 (goal < 1.2: nothing grows with the number of jobs).

One `celery worker` (prefork, one child), the simulator at zero latency, results and the
response cache in the S3 server; jobs are counted from the fleet's metrics in Redis.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from _common import ENDED, Fleet, document_lines, parser, report

from prism.datasets import parse_row
from prism.testing.simulator import Simulator, SimulatorConfig
from workers.metrics import KEY

JOBS, EARLY = 5000, 100
KEYS = ("rss_ratio", "rss_mib_100", "rss_mib_5000")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def pool_process(worker_pid: int) -> int:
    children = Path(f"/proc/{worker_pid}/task/{worker_pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    jobs, early = (300, 50) if quick else (JOBS, EARLY)
    lines = document_lines(jobs)
    with tempfile.TemporaryDirectory() as tmp, Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(parse_row(line, i) for i, line in enumerate(lines, 1))
        with Fleet(sim, Path(tmp)) as fleet:
            source = fleet.upload("memory.jsonl.gz", lines)
            fleet.start_workers(1, concurrency=1)
            child = pool_process(fleet.workers[0].proc.pid)
            counter = redis.Redis.from_url(fleet.redis_url)
            cmd = [
                str(Path(sys.executable).parent / "prism"),
                "run",
                source,
                "--results",
                f"s3://{fleet.bucket}/prism",
                "--run-id",
                "memory",
            ]
            producer = subprocess.Popen(
                cmd, env=fleet.env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            samples: dict[int, int] = {}
            started = time.monotonic()
            while producer.poll() is None:
                done = int(counter.hget(KEY, "jobs|documents|done") or 0)
                if done >= early and early not in samples:
                    samples[early] = rss_kb(child)
                if done >= jobs and jobs not in samples:
                    samples[jobs] = rss_kb(child)
                time.sleep(0.05)
            if producer.returncode not in ENDED:
                raise SystemExit(producer.stderr.read()[-3000:])
            elapsed = time.monotonic() - started
            assert pool_process(fleet.workers[0].proc.pid) == child, "the pool process was replaced"
    print(
        f"{jobs} jobs in {elapsed:.0f} s; pool process RSS {samples[early] / 1024:.1f} MiB after {early}, "
        f"{samples[jobs] / 1024:.1f} MiB after {jobs}",
        flush=True,
    )
    report(
        rss_ratio=round(samples[jobs] / samples[early], 3),
        rss_mib_100=round(samples[early] / 1024, 1),
        rss_mib_5000=round(samples[jobs] / 1024, 1),
    )


if __name__ == "__main__":
    main()
