"""A nightly run's cost with and without the provider-side levers, on one simulator and one fleet.

Q fixed generic questions over each of F FinanceBench filings (pages as chunks), run four times
by `prism run` on real `celery worker` processes, Redis, SeaweedFS and the simulator over HTTP:

- baseline: the question before the chunks (question_first), no prompt_cache_key, standard tier;
- flex: question_last, a prompt_cache_key per (model, filing segment) with warm-up and per-key
  pacing, and the flex tier (the simulator refuses some flex requests: retried, unpaid);
- batch: question_last and the key, through the Batch API (`--via batch`);
- prefilter: flex with the $0 pre-filter on (`PRISM_PREFILTER_SHARE=0.3`): the LLM reads less, so
  its figures (`usd_prefilter`, `prefilter_usd_ratio`) stand beside the ratios, not in them.

The simulator caches prefixes as the provider does (per machine, 128-token blocks past 1,024,
routing by the first tokens and the key, spill-over, expiry; inside batches for the gpt-5
family) and reports reasoning tokens (its default shares, derived from PRISM's ~15% completion
tokens) in every run. Beside the provider's cache it keeps the ceiling's (one machine that never
spills nor forgets): `ceiling_cached_share` and `ceiling_usd_ratio` are the most the flex run's
requests could have had cached and what it would then have cost. The LLM reads the same chunk text in the first three; only the order in the
prompt, the key and the tier differ. The response cache is off, so every request reaches the
simulator. `prism estimate`'s figure for the flex and batch runs is set beside what they cost.

Then the 129 FinanceBench page questions with qrels go through the oracle simulator in this
process, as the baseline sends them and with the levers: the same rankings, the same NDCG@5.

    python bench/nightly.py [--questions 10] [--filings 20]
"""

from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

from _common import PAGES, Fleet, parser, report
from batch import BATCH_ENV

from prism.datasets import load_queries
from prism.llm import Gateway
from prism.llm.endpoints import Endpoint, RequestOptions, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig, Usage
from prism.ranking.metrics import evaluate
from prism.ranking.rankers import build_ranker
from prism.ranking.strategies.chunks import prepare, rank_chunks
from prism.runs.estimate import estimate
from prism.segmenting import TokenCounter
from prism.testing.batches import BatchConfig
from prism.testing.prompt_cache import CacheModel
from prism.testing.simulator import DEFAULT_EFFORT, REASONING_SHARES, Simulator, SimulatorConfig

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
        "models": run["cost"]["by_model"],
        # Segment calls that found nothing cached: one per filing segment would be ideal.
        "cold_segment_calls": sum(
            1
            for r in run["results"]
            for c in r["calls"]
            if c["stage"] == "segments" and not c["usage"]["cached_tokens"] and c["error"] is None
        ),
        "pending": run["manifest"]["counts"].get("pending", 0),
    }


LEVERS = {"PRISM_PROMPT_LAYOUT": "question_last"}
# Batch answers wait in the response cache, which only that run reads; the others go past it,
# so no run is answered from another's requests. --fresh: the batch and flex runs share job ids
# (the tier is not part of the ranking config).
RUNS = (
    ("baseline", {"PRISM_PROMPT_LAYOUT": "question_first", "PRISM_PROMPT_CACHE_KEY": "false"}, ("--fresh",)),
    ("batch", LEVERS | BATCH_ENV | {"PRISM_CACHE": "true"}, ("--fresh", "--via", "batch")),
    ("flex", LEVERS | {"PRISM_SERVICE_TIER": "flex"}, ("--fresh",)),
    # One lever more, beside the figures above: the $0 pre-filter keeps the best pages in 30% of
    # each filing's tokens, so the LLM reads less (bench/prefilter.py measures what that does to
    # NDCG@5 on questions with qrels; these generic questions have none).
    ("prefilter", LEVERS | {"PRISM_SERVICE_TIER": "flex", "PRISM_PREFILTER_SHARE": "0.3"}, ("--fresh",)),
)
VISIBLE_OUTPUT = 40  # a ranking reply of ten indices, reasoning apart
KEYS = ("usd_ratio", "input_usd_ratio", "cached_prompt_share", "batch_usd_ratio", "estimate_error_flex")


def at_ceiling(run: dict, tier: str) -> Decimal:
    """The run's USD had the provider cached all that the ceiling did (one machine that never
    spills nor forgets): the least any schedule of these requests could pay."""
    model = max(run["models"], key=lambda m: run["models"][m]["prompt_tokens"])
    extra, prices = run["ceiling_cached"] - run["cached"], PriceTable.load()
    full = prices.usd(model, Usage(prompt_tokens=extra), tier) or Decimal(0)
    return run["usd"] - (full - (prices.usd(model, Usage(prompt_tokens=extra, cached_tokens=extra), tier) or full))


def estimated_usd(lines: list[str], scratch: Path) -> dict[str, Decimal]:
    """`prism estimate`'s figures for the levers' runs, before any call: the same question-last
    config, the simulator's documented reasoning share at its default effort."""
    path = scratch / "nightly.jsonl"
    path.write_text("".join(lines))
    config = RunConfig(chunk_ranker="llm", prompt_layout="question_last")
    outputs = {stage: VISIBLE_OUTPUT for stage in config.models}
    result = estimate(
        load_queries(path), config, PriceTable.load(), outputs, reasoning_share=REASONING_SHARES[DEFAULT_EFFORT]
    )
    return {tier: Decimal(result.usd[f"{tier}_cached"]) for tier in ("flex", "batch")}


def layouts_rank_alike(limit: int | None) -> dict:
    """The 129 FinanceBench page questions on the oracle simulator (noise 0.3), once as the
    baseline sends them and once with the levers (question last, cache key, flex with some
    refusals): the rankings must be the same, so the levers lose nothing on the way."""
    queries = load_queries(PAGES, limit=limit)
    qrels = {q.id: q.qrel for q in queries}
    counter = TokenCounter()
    rankings: dict[str, dict[str, list[int]]] = {}
    sim_config = SimulatorConfig(mode="oracle", noise=0.3, fault_rates={"flex_unavailable": 0.03})
    with Simulator(sim_config) as sim:
        sim.add_queries(queries)
        for name, layout, options in (
            ("baseline", "question_first", RequestOptions(prompt_cache_key=False)),
            ("levers", "question_last", RequestOptions(service_tier="flex")),
        ):
            config = RunConfig(chunk_ranker="llm", prompt_layout=layout)
            policy = RetryPolicy(timeout_s=600, max_attempts=20, backoff_cap_s=0.5)
            gateway = Gateway(
                Endpoint(base_url=sim.url, api_key="sk-bench"), PriceTable.load(), policy, options=options
            )
            segments, rerank = build_ranker(config, "segments", gateway), build_ranker(config, "rerank", gateway)

            def one(q, segments=segments, rerank=rerank, config=config):
                data = prepare(q.question, q.candidates, counter, config.segment_tokens)
                ranking, _ = rank_chunks(segments, rerank, data, 5, config.segment_top_k, config.segment_tokens)
                return q.id, ranking.indices

            with ThreadPoolExecutor(4) as pool:
                rankings[name] = dict(pool.map(one, queries))
    base, levers = rankings["baseline"], rankings["levers"]
    return {
        "oracle_ndcg5_baseline": evaluate(base, qrels)["ndcg@5"],
        "oracle_ndcg5_levers": evaluate(levers, qrels)["ndcg@5"],
        "oracle_same_rankings": f"{sum(base[q] == levers[q] for q in base)}/{len(base)}",
    }


def main() -> None:
    flags = parser(__doc__)
    flags.add_argument("--questions", type=int, default=10)
    flags.add_argument("--filings", type=int, default=20)
    flags.add_argument("--workers", type=int, default=2)
    flags.add_argument("--keep", type=Path, default=None, help="keep the logs in this folder")
    args = flags.parse_args()
    if args.quick:  # 2 questions over 2 filings, 6 oracle questions
        args.questions, args.filings = 2, 2
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
        tmp = Path(keep or scratch)
        estimated = estimated_usd(lines, tmp)
        sim.batch.config = BatchConfig(validate_s=0.2, process_s=2.0, finalize_s=0.2)
        env = {
            "PRISM_CHUNK_RANKER": "llm",
            "PRISM_CACHE": "false",
            "PRISM_LLM_LIMITS": json.dumps({"*": {"requests": "3000/minute", "tokens": "40000000/minute"}}),
        }
        # A Redis DB of its own: other benchmarks flush theirs.
        with Fleet(sim, tmp, redis_db_index=7, **env) as fleet:
            source = fleet.upload("nightly.jsonl.gz", lines)
            runs = {}
            for name, levers, args_ in RUNS:
                # The workers read the tier and the key option at start: a fresh fleet per run.
                fleet.stop_workers()
                fleet.start_workers(args.workers, concurrency=2, **levers)
                # Each run starts with the provider's cache empty, as on a night after the last.
                sim.clear_caches()
                before = sim.stats["ceiling_cached_tokens"]
                runs[name] = summary(fleet.run(source, f"nightly-{name}", *args_, **levers))
                runs[name]["spills"] = sim.prompt_cache.spills
                runs[name]["ceiling_cached"] = sim.stats["ceiling_cached_tokens"] - before
            fleet.stop_workers()
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
            ceiling_cached_tokens=s["ceiling_cached"],
            spilled_requests=s["spills"],
            **{
                f"{stage}_{what}": v[f"{what}_tokens"]
                for stage, v in s["stages"].items()
                for what in ("prompt", "cached")
            },
            wall_s=s["wall_s"],
        )
    base, flex, batch, prefilter = runs["baseline"], runs["flex"], runs["batch"], runs["prefilter"]
    report(
        estimate_usd_flex=float(estimated["flex"]),
        estimate_usd_batch=float(estimated["batch"]),
        estimate_error_flex=float(estimated["flex"] / flex["usd"] - 1),
        estimate_error_batch=float(estimated["batch"] / batch["usd"] - 1),
    )
    oracle = layouts_rank_alike(6 if args.quick else None)
    report(
        usd_baseline=float(base["usd"]),
        usd_flex=float(flex["usd"]),
        usd_batch=float(batch["usd"]),
        usd_ratio=float(flex["usd"] / base["usd"]),
        input_usd_ratio=float(flex["input_usd"] / base["input_usd"]),
        cached_prompt_share=flex["cached"] / flex["prompt"],
        batch_usd_ratio=float(batch["usd"] / base["usd"]),
        # The most the levers' requests could have had cached, and what the flex run would then
        # have cost: how far the schedule is from its best, and where the layout itself stops.
        ceiling_cached_share=flex["ceiling_cached"] / flex["prompt"],
        ceiling_usd_ratio=float(at_ceiling(flex, "flex") / base["usd"]),
        estimate_error_flex=float(estimated["flex"] / flex["usd"] - 1),
        usd_prefilter=float(prefilter["usd"]),
        prefilter_usd_ratio=float(prefilter["usd"] / base["usd"]),
        prefilter_prompt_ratio=prefilter["prompt"] / flex["prompt"],
        **oracle,
        lost=sum(expected - s["done"] - s["failed"] for s in runs.values()),
        failed=sum(s["failed"] for s in runs.values()),
    )


if __name__ == "__main__":
    main()
