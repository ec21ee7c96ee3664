"""`prism fetch` on four workers against the EDGAR imitation (prism/testing/edgar.py), which
enforces SEC's fair-access policy as SEC does: more than 10 requests in a second from one client
get the 403 threshold page. The imitation serves N copies of the shared real filings (N=600, or
60 with --quick) under new accession numbers on one day, with that day's index.

- `fetch_req_per_s_max`, `fetch_403`: the most requests the imitation saw arrive in any one
  second during the fetch, and the 403s it answered.
- `fetched`, `failed`: the filings written into the target, and those that failed.
- `fetch_wall_ratio`: the fetch's wall time (the whole `prism fetch` command, start-up included)
  over N/10 s, the least SEC's rate allows: near 1 is a fetch that used its allowance.
- `refetch_requests`: requests other than index files of a second, identical fetch.
- `naive_403`: the 403s of the same filings fetched by four threads with no limiter (each request
  still names itself): the imitation enforces the limit, so the limiter is what keeps the
  fleet under it.

    python bench/fetch.py [--quick]
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import requests
from _common import SHARED, parser, redis_db, report

from prism.testing.edgar import Imitation, write_layout
from prism.testing.feed import bases_in, copies
from workers.testing import WorkerProcess, fleet_env, prism_cli

KEYS = (
    "fetch_req_per_s_max",
    "fetch_403",
    "refetch_requests",
    "fetched",
    "failed",
    "fetch_wall_ratio",
    "naive_403",
    "filings",
    "fetch_wall_s",
)
DAY = date(2024, 3, 4)
AGENT = "prism-fleet bench bench@example.com"


def naive(imitation: Imitation, paths: list[str], threads: int = 4) -> int:
    """The filings fetched as fast as four threads go, no limiter: the 403s they get."""
    before = imitation.refused()
    chunks = [paths[i::threads] for i in range(threads)]

    def worker(mine: list[str]) -> None:
        with requests.Session() as session:
            session.headers["User-Agent"] = AGENT
            for path in mine:
                session.get(imitation.url + path, timeout=30)

    started = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return imitation.refused() - before


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    n = 60 if quick else 600
    bases = [b for b in bases_in(SHARED / "edgar" / "filings", SHARED / "edgar-nc") if len(b.documents) < 300_000]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_layout(work / "edgar", copies(bases, n, DAY, nc_every=0))
        with Imitation(work / "edgar") as imitation:
            env = fleet_env(redis_db(15), None, None, PRISM_EDGAR_URL=imitation.url, PRISM_SEC_USER_AGENT=AGENT)
            workers = [WorkerProcess(env, work / f"worker-{i}.log", concurrency=1) for i in range(4)]
            try:
                args = ["fetch", "--out", str(work / "out"), "--since", str(DAY), "--until", str(DAY)]
                started = time.monotonic()
                done = prism_cli(args, env, work, timeout=1800)
                wall = time.monotonic() - started
                assert done.returncode in (0, 3), done.stderr[-3000:]
                first = list(imitation.log)
                fetched = len(list((work / "out" / "edgar" / "data").rglob("*.txt")))
                failed = sum(1 for line in done.stderr.splitlines() if line.startswith("not fetched:"))
                before = len(imitation.log)
                again = prism_cli(args, env, work, timeout=600)
                assert again.returncode == 0, again.stderr[-3000:]
                refetch = [s.path for s in imitation.log[before:] if "/edgar/data/" in s.path]
            finally:
                for w in workers:
                    w.stop()
            probe = Imitation(work / "edgar")  # a fresh count for the naive fetch
            imitation.log = first
            peak, refused = imitation.max_per_second(), imitation.refused()
        with probe:
            paths = sorted({s.path for s in first if "/edgar/data/" in s.path})
            naive_403 = naive(probe, paths)
    print(done.stderr.strip().splitlines()[-1])
    report(
        fetch_req_per_s_max=peak,
        fetch_403=refused,
        refetch_requests=len(refetch),
        fetched=fetched,
        failed=failed,
        fetch_wall_ratio=round(wall / (n / 10), 3),
        naive_403=naive_403,
        filings=n,
        fetch_wall_s=round(wall, 2),
    )


if __name__ == "__main__":
    main()
