"""Reruns: the same input and config ranked twice, as a nightly job over unchanged filings.

Run 1 ranks 296 document rows and 20 page rows through 2 workers against the simulator (0.2 s
per call). Run 2 (a new run id) reuses run 1's results by job id; run 3 is forced to rank
again (--fresh) and is answered by the response cache. Printed: LLM calls and requests the
simulator saw in runs 2 and 3, and their wall times over run 1's.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from _common import DOC_DEV, PAGES, Fleet, load, parser, report

from prism.testing.simulator import Simulator, SimulatorConfig

KEYS = ("second_run_llm_calls", "second_run_requests", "wall_ratio", "fresh_run_requests", "fresh_wall_ratio")


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    documents, pages = (30, 3) if quick else (None, 20)
    with gzip.open(PAGES, "rt") as f:
        lines = DOC_DEV.read_text().splitlines(keepends=True)[:documents] + [next(f) for _ in range(pages)]
    with tempfile.TemporaryDirectory() as tmp, Simulator(SimulatorConfig(mode="oracle", latency_s=0.2)) as sim:
        sim.add_queries(load(DOC_DEV, limit=documents) + load(PAGES, limit=pages))
        with Fleet(sim, Path(tmp)) as fleet:
            source = fleet.upload("nightly.jsonl.gz", lines)
            fleet.start_workers(2, concurrency=2)
            runs, requests = {}, {}
            for name, args in (("first", ()), ("second", ()), ("fresh", ("--fresh",))):
                before = sim.stats["requests"]
                runs[name] = fleet.run(source, f"rerun-{name}", *args)
                requests[name] = sim.stats["requests"] - before
                total = runs[name]["cost"]["total"]
                print(
                    f"{name}: {runs[name]['wall_s']:.1f} s, {total['calls']} LLM calls ({total['cached_calls']} cached), {requests[name]} requests to the provider, USD {float(total['usd']):.4f}",
                    flush=True,
                )
    first = runs["first"]["wall_s"]
    report(
        second_run_llm_calls=runs["second"]["cost"]["total"]["calls"],
        second_run_requests=requests["second"],
        wall_ratio=round(runs["second"]["wall_s"] / first, 3),
        fresh_run_requests=requests["fresh"],
        fresh_run_usd=float(runs["fresh"]["cost"]["total"]["usd"]),
        fresh_wall_ratio=round(runs["fresh"]["wall_s"] / first, 3),
        first_run_llm_calls=runs["first"]["cost"]["total"]["calls"],
    )


if __name__ == "__main__":
    main()
