"""The pre-filter: tokens per chunk query and NDCG@5 with and without it.

The 129 FinanceBench page-ranking questions (median 136 pages) through segmented ranking
against the oracle simulator at noise 0.3, in this process with the fleet's own rankers and
gateway. With the pre-filter, only the M pages that its scorer ranks best reach the LLM
(M = 45 for the headline figures, about a third of a median filing; 30 and 20 as well), and
with the pre-filter by share, the best pages that fit in 30% of the filing's tokens.
Tokens are what the simulator billed (prompt + completion) per query. The scorer is the
default "financial" retriever; `--dense lsa` fuses BM25 with per-filing LSA instead, and
`--dense minilm` with MiniLM (the [minilm] extra; slow on 2 cores), and `--dense financial-minilm`
is the financial retriever with MiniLM as one more signal.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor

from _common import PAGES, parser, report

from prism.datasets import load_queries
from prism.llm import Gateway, recording
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig
from prism.ranking.embeddings import local_embedder
from prism.ranking.hybrid import SCORERS
from prism.ranking.metrics import evaluate
from prism.ranking.rankers import build_ranker
from prism.ranking.strategies.chunks import prepare, rank_chunks
from prism.segmenting import TokenCounter
from prism.testing.simulator import Simulator, SimulatorConfig

# Pre-filters by tag: keep M pages, or (share) the best that fit in that share of the tokens.
PREFILTERS: dict[str, dict] = {
    "without": {},
    "keep45": {"keep": 45},
    "keep30": {"keep": 30},
    "keep20": {"keep": 20},
    "share30": {"share": 0.30},
}
HEADLINE = "keep45"
KEYS = ("token_ratio", "ndcg_with", "ndcg_without")


def main() -> None:
    flags = parser(__doc__)
    flags.add_argument("--dense", default="financial", help="the pre-filter's scorer (default financial)")
    args = flags.parse_args()
    queries = load_queries(PAGES, limit=8 if args.quick else None)
    qrels = {q.id: q.qrel for q in queries}
    counter, config = TokenCounter(), RunConfig(chunk_ranker="llm")
    budget = config.segment_tokens
    figures: dict[str, float] = {}
    with Simulator(SimulatorConfig(mode="oracle", noise=0.3)) as sim:
        sim.add_queries(queries)
        gateway = Gateway(Endpoint(base_url=sim.url, api_key="sk-bench"), PriceTable.load(), RetryPolicy(timeout_s=600))
        segments, rerank = build_ranker(config, "segments", gateway), build_ranker(config, "rerank", gateway)

        dense = args.dense if args.dense in SCORERS else local_embedder(args.dense)

        def one(q, prefilter):
            data = prepare(q.question, q.candidates, counter, budget, dense=dense, **prefilter)
            with recording() as calls:
                ranking, _ = rank_chunks(segments, rerank, data, 5, 10, budget)
            return ranking.indices, sum(c.usage.total_tokens for c in calls)

        for tag, prefilter in PREFILTERS.items():
            with ThreadPoolExecutor(4) as pool:
                out = list(pool.map(lambda q, prefilter=prefilter: one(q, prefilter), queries))
            ndcg = evaluate({q.id: r for q, (r, _) in zip(queries, out)}, qrels)["ndcg@5"]
            tokens = statistics.mean(t for _, t in out)
            figures[f"ndcg_{tag}"], figures[f"tokens_per_query_{tag}"] = round(ndcg, 4), round(tokens)
            print(f"{tag}: NDCG@5 {ndcg:.4f}, {tokens:,.0f} tokens per query", flush=True)
    base = figures["tokens_per_query_without"]
    for tag in list(PREFILTERS)[1:]:
        figures[f"token_ratio_{tag}"] = round(figures[f"tokens_per_query_{tag}"] / base, 4)
    headline = {
        "token_ratio": figures[f"token_ratio_{HEADLINE}"],
        "ndcg_with": figures[f"ndcg_{HEADLINE}"],
        "ndcg_without": figures.pop("ndcg_without"),
        "keep": PREFILTERS[HEADLINE]["keep"],
    }
    report(**headline, dense=args.dense, **figures)


if __name__ == "__main__":
    main()
