"""A nightly run's cost with and without the provider-side levers, on one simulator and one fleet.

Q fixed generic questions over each of F FinanceBench filings (pages as chunks), run twice by
`prism run` on real `celery worker` processes, Redis, SeaweedFS and the simulator over HTTP:

- baseline: the question before the chunks (question_first), no prompt_cache_key, standard tier;
- levers: question_last, a prompt_cache_key per (model, filing segment) with warm-up and
  per-key pacing, and the flex tier (the simulator refuses some flex requests: retried, unpaid).

The simulator caches prefixes as the provider does (per machine, 128-token blocks past 1,024,
routing by the first tokens and the key, spill-over, expiry) and reports reasoning tokens (its
default shares, derived from PRISM's ~15% completion tokens) in both runs. The LLM reads the same
chunk text in both; only the order in the prompt, the key and the tier differ. The response
cache is off, so every request reaches the simulator.

    python bench/nightly.py [--questions 10] [--filings 12]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from decimal import Decimal
from pathlib import Path

from _common import PAGES, Fleet, report

from prism.datasets import load_queries
from prism.testing.prompt_cache import CacheModel
from prism.testing.simulator import REASONING_SHARES, Simulator, SimulatorConfig

QUESTIONS = (
    "What was total revenue for the most recent fiscal year, and how did it change from the prior year?",
    "What was the operating income or operating margin for the period?",
    "How much cash and cash equivalents did the company hold at the end of the period?",
    "What was net cash provided by operating activities?",
    "What is the total debt, and when does it mature?",
    "What were the capital expenditures for the year?",
    "What dividends or share repurchases did the company make?",
    "What are the main risk factors the company names?",
    "What guidance or outlook does management give for the next year?",
    "What was diluted earnings per share?",
    "How large is goodwill, and was any impairment recorded?",
    "What was the effective tax rate?",
)


def nightly_rows(questions: int, filings: int) -> list[str]:
    """Question-major, as a question set is written: every filing for the first question, then
    the next; each filing's pages as its chunks."""
    seen: dict[str, list[str]] = {}
    for q in load_queries(PAGES):
        if q.task == "chunks":
            seen.setdefault(q.candidates[0][:500], list(q.candidates))
        if len(seen) == filings:
            break
    rows = []
    for qi, question in enumerate(QUESTIONS[:questions]):
        for fi, pages in enumerate(seen.values()):
            rows.append(json.dumps({"id": f"q{qi}-f{fi}", "task": "chunks", "question": question, "candidates": pages}))
    return [r + "\n" for r in rows]


def summary(run: dict) -> dict:
    total = run["cost"]["total"]
    return {
        "usd": Decimal(total["usd"]),
        "input_usd": Decimal(total["input_usd"]),
        "prompt": total["prompt_tokens"],
        "cached": total["cached_tokens"],
        "reasoning": total["reasoning_tokens"],
        "failed": run["manifest"]["counts"].get("failed", 0),
        "done": run["manifest"]["counts"].get("done", 0),
        "throttled": total["throttled"],
        "wall_s": run["wall_s"],
        "status": run["manifest"]["status"],
        "stages": run["cost"]["by_stage"],
        # Segment calls that found nothing cached: one per filing segment would be ideal.
        "cold_segment_calls": sum(
            1
            for r in run["results"]
            for c in r["calls"]
            if c["stage"] == "segments" and not c["usage"]["cached_tokens"] and c["error"] is None
        ),
        "pending": run["manifest"]["counts"].get("pending", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--filings", type=int, default=12)  # 10 x 12 keeps the two runs under 5 minutes
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="keep the logs in this folder")
    args = parser.parse_args()
    lines = nightly_rows(args.questions, args.filings)
    config = SimulatorConfig(
        latency_s=0.05,
        seed=7,
        fault_rates={"flex_unavailable": 0.03},
        cache=CacheModel(machines=8),
        reasoning_share=REASONING_SHARES,
    )
    keep = tempfile.mkdtemp(dir=args.keep) if args.keep else None
    with tempfile.TemporaryDirectory() as scratch, Simulator(config) as sim:
        tmp = keep or scratch
        env = {
            "PRISM_CHUNK_RANKER": "llm",
            "PRISM_CACHE": "false",
            "PRISM_LLM_LIMITS": json.dumps({"*": {"requests": "3000/minute", "tokens": "40000000/minute"}}),
        }
        # A Redis DB of its own: other benchmarks flush theirs.
        with Fleet(sim, Path(tmp), redis_db_index=7, **env) as fleet:
            fleet.start_workers(args.workers, concurrency=2)
            source = fleet.upload("nightly.jsonl.gz", lines)
            runs = {}
            for name, levers in (
                ("baseline", {"PRISM_PROMPT_LAYOUT": "question_first", "PRISM_PROMPT_CACHE_KEY": "false"}),
                ("flex", {"PRISM_PROMPT_LAYOUT": "question_last", "PRISM_SERVICE_TIER": "flex"}),
            ):
                # The workers read the tier and the key option at start: a fresh fleet per run.
                fleet.stop_workers()
                fleet.start_workers(args.workers, concurrency=2, **levers)
                spills = sim.prompt_cache.spills if sim.prompt_cache else 0
                runs[name] = summary(fleet.run(source, f"nightly-{name}", **levers))
                runs[name]["spills"] = (sim.prompt_cache.spills if sim.prompt_cache else 0) - spills
        base, flex = runs["baseline"], runs["flex"]
        expected = len(lines)
        for name, s in runs.items():
            report(
                run=name,
                queries=s["done"],
                prompt_tokens=s["prompt"],
                cached_tokens=s["cached"],
                reasoning_tokens=s["reasoning"],
                throttled=s["throttled"],
                usd=float(s["usd"]),
                status=s["status"],
                pending=s["pending"],
                cold_segment_calls=s["cold_segment_calls"],
                spilled_requests=s["spills"],
                **{
                    f"{stage}_{what}": v[f"{what}_tokens"]
                    for stage, v in s["stages"].items()
                    for what in ("prompt", "cached")
                },
                wall_s=s["wall_s"],
            )
        report(
            usd_baseline=float(base["usd"]),
            usd_flex=float(flex["usd"]),
            usd_ratio=float(flex["usd"] / base["usd"]),
            input_usd_ratio=float(flex["input_usd"] / base["input_usd"]),
            cached_prompt_share=flex["cached"] / flex["prompt"],
            lost=sum(expected - s["done"] - s["failed"] for s in runs.values()),
            failed=base["failed"] + flex["failed"],
        )


if __name__ == "__main__":
    main()
