"""A self-hosted model server with one slot, as llama.cpp runs: the provider simulator in its
`--slots 1` mode computes one request at a time, queues the rest in arrival order, and computes an
answer to its end even when the client has given up on it. Its service time is fixed at half the
request timeout (PRISM_LLM_TIMEOUT_S: 4 s, 2 s with --quick), and four senders (the embedded
run's worker threads) rank the bundled EDGAR sample's first questions (4, or 2 with --quick) with
the LLM chunk ranker in segments of 12,000 tokens
(documents by the $0 prior, so every request is a chunk ranking). Twice: without a cap on
requests in flight (PRISM_LLM_CONCURRENCY={"*": 0}), then capped at one at a time (set:
PRISM_LLM_CONCURRENCY={"*": 1}), then with nothing set, as a server that reports no slots gets it:
a limit that adapts (prism.llm.adaptive), starting at one. A timed-out request is sent again with the
default backoff (up to 60 s apart) until it is answered, so every run ranks every question.

- `timeouts_uncapped`, `timeouts_capped`: attempts that timed out, from each run's cost report.
- `useful_share_uncapped`, `useful_share_capped`: the server's seconds on answers a client read,
  over its busy seconds (the simulator's own count: an answer is read when its client is still
  connected as it is sent).
- `wall_ratio`: the capped run's wall time over the uncapped one's; both rank every question.
- `timeouts_adaptive`, `useful_share_adaptive`: the same with the adaptive limit.

    python bench/local_server.py [--quick]
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from _common import ENDED, parser, report

from prism.testing.simulator import Simulator, SimulatorConfig
from producer.sample import SAMPLE
from workers.testing import fleet_env, prism_cli

KEYS = (
    "timeouts_uncapped",
    "timeouts_capped",
    "useful_share_uncapped",
    "useful_share_capped",
    "wall_ratio",
    "questions",
    "wall_s_uncapped",
    "wall_s_capped",
    "timeouts_adaptive",
    "useful_share_adaptive",
    "wall_s_adaptive",
)
TIMEOUT_S = 4.0  # the request timeout; --quick: 2 s. The server's service time is half of it.


def ranked(sim: Simulator, work: Path, questions: Path, name: str, concurrency: str, timeout_s: float) -> dict:
    """One run against the one-slot server: its wall time, timeouts, and the server's shares,
    once the server has finished what an earlier run left it computing."""
    while sim.stats["in_flight"]:
        time.sleep(0.2)
    sim.stats.clear()
    env = fleet_env(
        None,
        None,
        sim.url,
        PRISM_RESULTS=str(work / f"results-{name}"),  # its own: no result of the other run reused
        PRISM_LLM_CONCURRENCY=concurrency,
        PRISM_LLM_TIMEOUT_S=str(timeout_s),
        PRISM_DOC_RANKER="prior",
        PRISM_CHUNK_RANKER="llm",
        PRISM_SEGMENT_TOKENS="12000",
        PRISM_EMBEDDED_WORKERS="4",
        PRISM_CHECK_SYSTEM_PROMPT="false",
        PRISM_CACHE="false",
        # re-sent, further apart each time (the default backoff, up to 60 s), until answered:
        # both runs rank every question
        PRISM_LLM_BACKOFF_CAP_S="60",
        PRISM_LLM_TIMEOUT_RETRIES="30",
        PRISM_LLM_MAX_ATTEMPTS="30",
    )
    started = time.monotonic()
    args = ["run", "--questions", str(questions), "--corpus", str(work / "corpus"), "--run-id", name]
    done = prism_cli(args, env, work, timeout=1800)
    wall = time.monotonic() - started
    assert done.returncode in ENDED, done.stderr[-3000:]
    run = work / f"results-{name}" / "runs" / name
    manifest = json.loads((run / "manifest.json").read_text())
    cost = json.loads((run / "cost.json").read_text())["total"]
    busy = sim.stats["busy_ms"] or 1
    failures = run / "failures.jsonl"
    for line in (failures.read_text().splitlines() if failures.exists() else [])[:3]:
        print(f"{name}: failed: {line[:400]}", flush=True)
    return {
        "wall": wall,
        "timeouts": cost["timeouts"],
        "useful": sim.stats["useful_ms"] / busy,
        "done": manifest["counts"]["done"],
        "said": [line for line in done.stderr.splitlines() if "at a time" in line],
    }


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    n, timeout_s = (2, TIMEOUT_S / 2) if quick else (4, TIMEOUT_S)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lines = (SAMPLE / "questions.jsonl").read_text().splitlines()[:n]
        questions = work / "questions.jsonl"
        questions.write_text("\n".join(lines) + "\n")
        ingest = prism_cli(
            ["ingest", str(SAMPLE / "filings"), "--corpus", str(work / "corpus")], fleet_env(None, None, None), work
        )
        assert ingest.returncode == 0, ingest.stderr[-2000:]
        sim = Simulator(SimulatorConfig(mode="lexical", latency_s=timeout_s / 2, slots=1)).start()
        try:
            uncapped = ranked(sim, work, questions, "uncapped", '{"*": 0}', timeout_s)
            capped = ranked(sim, work, questions, "capped", '{"*": 1}', timeout_s)
            adaptive = ranked(sim, work, questions, "adaptive", "{}", timeout_s)  # nothing set
        finally:
            sim.stop()
    assert uncapped["done"] == capped["done"] == adaptive["done"] == n, (uncapped, capped, adaptive)
    print(*capped["said"], *adaptive["said"], sep="\n")
    report(
        timeouts_uncapped=uncapped["timeouts"],
        timeouts_capped=capped["timeouts"],
        useful_share_uncapped=round(uncapped["useful"], 3),
        useful_share_capped=round(capped["useful"], 3),
        wall_ratio=round(capped["wall"] / uncapped["wall"], 3),
        questions=n,
        wall_s_uncapped=round(uncapped["wall"], 1),
        wall_s_capped=round(capped["wall"], 1),
        timeouts_adaptive=adaptive["timeouts"],
        useful_share_adaptive=round(adaptive["useful"], 3),
        wall_s_adaptive=round(adaptive["wall"], 1),
    )


if __name__ == "__main__":
    main()
