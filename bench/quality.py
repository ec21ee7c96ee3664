"""Quality of the $0 rankers on the shared data: NDCG@5, MRR@5, MAP@5 (ranx).

Documents: the 296 evaluation rows (document_ranking_kaggle_dev.jsonl); the prior was fitted
on the other 4,570 rows and never saw them. Pages: the 129 FinanceBench page-ranking
questions; nothing here is fitted on them (LSA is fitted per filing, on its own text, without
labels). Rankers: BM25, dense (hashed embedding; per-filing LSA for pages; MiniLM too when the
[minilm] extra is installed), hybrid (BM25 + dense by reciprocal rank fusion), and for
documents the constant type order and the learned prior. `--minilm` adds MiniLM dense and
hybrid for pages (needs the [minilm] extra; about 20 minutes on 2 cores).
"""

from __future__ import annotations

from _common import DOC_DEV, PAGES, load, parser, report
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

from prism.models import Ranking
from prism.ranking.embeddings import local_embedder
from prism.ranking.hybrid import HybridRanker, dense_scores
from prism.ranking.lexical import LexicalRanker
from prism.ranking.rankers import document_lexical_ranker
from workers.priors import PACKAGED, read_prior
from workers.settings import Settings

METRICS = ["ndcg@5", "mrr@5", "map@5"]
KEYS = ("doc_ndcg5_best", "page_ndcg5_best", "doc_prior_ndcg5", "page_bm25_ndcg5")


class DenseRanker:
    def __init__(self, dense, expand=None):
        self.dense, self.expand = dense, expand or {}

    def rank(self, question, candidates, top_k):
        scores = dense_scores(question, [self.expand.get(c, c) for c in candidates], self.dense)
        return Ranking(indices=sorted(range(len(candidates)), key=lambda i: (-scores[i], i))[:top_k])


class Expanded:
    """A ranker over the filing types' descriptions instead of their bare names."""

    def __init__(self, ranker, expand):
        self.ranker, self.expand = ranker, expand

    def rank(self, question, candidates, top_k):
        return self.ranker.rank(question, [self.expand.get(c, c) for c in candidates], top_k)


class Remembering:
    """An embedder that embeds each text once (dense and hybrid read the same pages)."""

    def __init__(self, embedder):
        self.embedder, self.name, self.seen = embedder, embedder.name, {}

    def embed(self, texts):
        import numpy as np

        new = [t for t in dict.fromkeys(texts) if t not in self.seen]
        if new:
            self.seen.update(zip(new, self.embedder.embed(new)))
        return np.stack([self.seen[t] for t in texts])


def score(rows, ranker) -> dict[str, float]:
    qrels = Qrels({q.id: {str(i): g for i, g in q.qrel.items() if g > 0} for q in rows})
    run = Run(
        {
            q.id: {str(i): float(10 - p) for p, i in enumerate(ranker.rank(q.question, q.candidates, 5).indices)}
            for q in rows
        }
    )
    return ranx_evaluate(qrels, run, METRICS)


def main() -> None:
    figures: dict[str, float] = {}

    def record(prefix: str, name: str, rows, ranker) -> None:
        values = score(rows, ranker)
        for metric in METRICS:
            figures[f"{prefix}_{name}_{metric.replace('@', '')}"] = round(values[metric], 4)
        print(f"{prefix} {name}: " + ", ".join(f"{m} {values[m]:.4f}" for m in METRICS), flush=True)

    flags = parser(__doc__)
    flags.add_argument("--minilm", action="store_true", help="MiniLM dense and hybrid for pages (the [minilm] extra)")
    args = flags.parse_args()
    documents, pages = load(DOC_DEV, limit=60 if args.quick else None), load(PAGES, limit=10 if args.quick else None)
    expand = document_lexical_ranker().expand
    hashed = local_embedder("hashed")
    prior = read_prior(PACKAGED, Settings())
    order = prior.meta["constant_order"]
    constant = type("Constant", (), {"rank": lambda self, q, c, k: Ranking(indices=order[:k])})()
    record("doc", "constant", documents, constant)
    record("doc", "bm25", documents, document_lexical_ranker())
    record("doc", "dense", documents, DenseRanker(hashed, expand))
    record("doc", "hybrid", documents, Expanded(HybridRanker(hashed), expand))
    record("doc", "prior", documents, prior)
    record("page", "bm25", pages, LexicalRanker())
    record("page", "dense_lsa", pages, DenseRanker("lsa"))
    record("page", "dense_hashed", pages, DenseRanker(hashed))
    record("page", "hybrid", pages, HybridRanker("lsa"))
    if args.minilm:
        minilm = Remembering(local_embedder("minilm"))
        record("page", "dense_minilm", pages, DenseRanker(minilm))
        record("page", "hybrid_minilm", pages, HybridRanker(minilm))
    best = {
        p: max(v for k, v in figures.items() if k.startswith(f"{p}_") and k.endswith("ndcg5")) for p in ("doc", "page")
    }
    report(doc_ndcg5_best=best["doc"], page_ndcg5_best=best["page"], **figures)


if __name__ == "__main__":
    main()
