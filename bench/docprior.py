"""Document ranking at $0: the learned prior against the constant type order and against an
LLM (the oracle simulator with noise 0.3 and 0.5), alone, as a cascade and fused.

On the 296 evaluation rows, none of which the shipped prior was fitted on; scored with ranx
(ndcg@5, mrr@5, map@5). The cascade asks the LLM only below the prior's confidence threshold
(set at fit time from cross-validation on training rows).
"""

from __future__ import annotations

from _common import DOC_DEV, load, parser, report
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

from prism.llm import Gateway, recording
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig
from prism.ranking.rankers import build_ranker
from prism.testing.simulator import Simulator, SimulatorConfig
from workers.priors import PACKAGED, read_prior
from workers.settings import Settings

METRICS = ["ndcg@5", "mrr@5", "map@5"]
KEYS = (
    "constant_ndcg5",
    "prior_ndcg5",
    "llm_only_ndcg5_noise03",
    "cascade_ndcg5_noise03",
    "cascade_llm_fraction_noise03",
)


def score(rankings: dict[str, list[int]], qrels: Qrels) -> dict[str, float]:
    run = Run({q: {str(i): float(10 - p) for p, i in enumerate(r)} for q, r in rankings.items()})
    return ranx_evaluate(qrels, run, METRICS)


def main() -> None:
    rows = load(DOC_DEV, limit=40 if parser(__doc__).parse_args().quick else None)
    qrels = Qrels({q.id: {str(i): g for i, g in q.qrel.items() if g > 0} for q in rows})
    prior = read_prior(PACKAGED, Settings())
    figures: dict[str, float] = {}

    def record(name: str, rankings: dict[str, list[int]]) -> None:
        values = score(rankings, qrels)
        figures[f"{name}_ndcg5"], figures[f"{name}_mrr5"], figures[f"{name}_map5"] = (
            round(values[m], 4) for m in METRICS
        )
        print(
            f"{name}: ndcg@5 {values['ndcg@5']:.4f}, mrr@5 {values['mrr@5']:.4f}, map@5 {values['map@5']:.4f}",
            flush=True,
        )

    order = prior.meta["constant_order"]
    record("constant", {q.id: order for q in rows})
    record("prior", {q.id: prior.rank(q.question, q.candidates, 5).indices for q in rows})
    with Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(rows)
        gateway = Gateway(Endpoint(base_url=sim.url, api_key="sk-bench"), PriceTable.load(), RetryPolicy(), cache=None)
        for noise in (0.3, 0.5):
            sim.config.noise = noise
            tag = f"noise{noise:.1f}".replace(".", "")
            for kind in ("llm", "cascade", "fuse"):
                ranker = build_ranker(RunConfig(doc_ranker=kind), "documents", gateway, prior)
                asked, rankings = 0, {}
                for q in rows:
                    with recording() as calls:
                        rankings[q.id] = ranker.rank(q.question, q.candidates, 5).indices
                    asked += bool(calls)
                name = {"llm": "llm_only"}.get(kind, kind) + f"_{tag}"
                record(name, rankings)
                figures[f"{name}_llm_fraction"] = round(asked / len(rows), 4)
    figures["cascade_llm_fraction_noise03"] = figures.pop("cascade_noise03_llm_fraction")
    figures["cascade_llm_fraction_noise05"] = figures.pop("cascade_noise05_llm_fraction")
    keys = list(KEYS)
    rename = {"llm_only_noise03_ndcg5": "llm_only_ndcg5_noise03", "cascade_noise03_ndcg5": "cascade_ndcg5_noise03"}
    figures = {rename.get(k, k): v for k, v in figures.items()}
    report(**{k: figures[k] for k in keys}, **{k: v for k, v in figures.items() if k not in keys})


if __name__ == "__main__":
    main()
