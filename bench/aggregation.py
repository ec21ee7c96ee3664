"""Aggregation correctness: segmented chunk ranking against the oracle simulator.

With the oracle at noise 0, segmenting, pooling and re-ranking must lose nothing (NDCG@5 = 1.0
on the FinanceBench page-ranking set). At noise 0.2 and 0.4 (each candidate's grade replaced by
a random one with that chance, per request) it prints segmented against single-pass NDCG@5,
where single-pass puts the whole filing in one prompt, ignoring the budget.
The same rankers and gateway as the fleet, over HTTP to the simulator, in this process.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from _common import PAGES, load, parser, report

from prism.llm import Gateway
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig
from prism.ranking.metrics import evaluate
from prism.ranking.rankers import build_ranker
from prism.ranking.strategies.chunks import prepare, rank_chunks
from prism.segmenting import TokenCounter
from prism.testing.simulator import Simulator, SimulatorConfig

KEYS = ("ndcg_noise0", "single_noise0", "segmented_noise02", "single_noise02")


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    queries = load(PAGES, limit=12 if quick else None)
    counter, config = TokenCounter(), RunConfig(chunk_ranker="llm")
    budget = config.segment_tokens
    inputs = {q.id: prepare(q.question, q.candidates, counter, budget) for q in queries}
    qrels = {q.id: q.qrel for q in queries}
    figures: dict[str, float] = {"queries": len(queries)}
    with Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(queries)
        gateway = Gateway(Endpoint(base_url=sim.url, api_key="sk-bench"), PriceTable.load(), RetryPolicy(timeout_s=600))
        segments, rerank = build_ranker(config, "segments", gateway), build_ranker(config, "rerank", gateway)
        for noise in (0.0, 0.2) if quick else (0.0, 0.2, 0.4):
            sim.config.noise = noise
            started = time.monotonic()
            with ThreadPoolExecutor(4) as pool:
                segmented = dict(
                    zip(
                        inputs,
                        pool.map(lambda d: rank_chunks(segments, rerank, d, 5, 10, budget)[0].indices, inputs.values()),
                    )
                )
                single = {
                    q.id: r.indices
                    for q, r in zip(queries, pool.map(lambda q: segments.rank(q.question, q.candidates, 5), queries))
                }
            tag = f"{noise:.1f}".replace(".", "")
            figures[f"segmented_noise{tag}"] = evaluate(segmented, qrels)["ndcg@5"]
            figures[f"single_noise{tag}"] = evaluate(single, qrels)["ndcg@5"]
            print(
                f"noise {noise}: segmented {figures[f'segmented_noise{tag}']:.4f}, single-pass {figures[f'single_noise{tag}']:.4f} ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    figures["ndcg_noise0"] = figures.pop("segmented_noise00")
    figures["single_noise0"] = figures.pop("single_noise00")
    report(**figures)


if __name__ == "__main__":
    main()
