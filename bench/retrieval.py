"""$0 page retrieval on the 129 FinanceBench page questions: how well each retriever ranks a
filing's pages (NDCG@5) and how often the evidence survives a pre-filter.

- ``recall_at_30pct``: share of questions with an evidence page among the pages that the
  pre-filter by share (``PRISM_PREFILTER_SHARE=0.3``) keeps: the best-ranked that fit together
  in 30% of the filing's tokens (o200k counts), a page too big for what is left passed over for
  the smaller ones after it; ``recall_all_at_30pct``: all of them; ``recall_prefix_at_30pct``:
  the best-ranked pages up to the first that does not fit (a stricter pre-filter);
- ``recall_at_45``: an evidence page among the best 45 pages (the whole filing when smaller);
- ``pages_per_s``: filing pages indexed and scored per CPU second (process time, one core),
  the per-filing index built once and reused by the filing's questions.

``--minilm`` (the [minilm] extra) adds all-MiniLM-L6-v2 alone, fused with BM25, and as one more
signal of the financial retriever, fitted by halves the same way (about 20 minutes on one core);
``--wordllama`` (the [wordllama] extra) does the same with WordLlama's static vectors.

The financial retriever's weights are fitted (logistic regression on signals standardised per
filing) on one half of the filings and scored on the other, both ways; its last-line figures
are those out-of-half scores. The shipped weights (fitted on all questions) are shown too,
in-sample.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
from _common import PAGES, parser, report
from sklearn.linear_model import LogisticRegression

from prism.datasets import load_queries
from prism.ranking.hybrid import hybrid_scores, rrf, within_budget
from prism.ranking.lexical import bm25_scores
from prism.ranking.metrics import evaluate
from prism.ranking.retrieval import DENSE_WEIGHTS, SIGNALS, WEIGHTS, FilingIndex, fuse, standardise
from prism.segmenting import TokenCounter

SHARE, KEEP = 0.30, 45
DENSE = ("minilm", "wordllama")  # the embedders a flag adds: --minilm, --wordllama
KEYS = ("recall_at_30pct", "recall_at_45", "ndcg5", "pages_per_s")


def order_of(scores) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def figures(queries, scores: dict[str, np.ndarray], tokens: dict[str, np.ndarray]) -> dict[str, float]:
    runs, any30, all30, prefix30, any45 = {}, 0, 0, 0, 0
    for q in queries:
        order = order_of(scores[q.id])
        runs[q.id] = order[:5]
        evidence = {i for i, g in q.qrel.items() if g > 0}
        budget = SHARE * tokens[q.id].sum()
        kept = set(within_budget(order, tokens[q.id], budget))  # as the pre-filter by share keeps
        prefix = set(order[: int(np.searchsorted(np.cumsum(tokens[q.id][order]), budget, side="right"))])
        any30 += bool(evidence & kept)
        all30 += evidence <= kept
        prefix30 += bool(evidence & prefix)
        any45 += bool(evidence & set(order[:KEEP]))
    n = len(queries)
    ndcg = evaluate(runs, {q.id: q.qrel for q in queries})["ndcg@5"]
    return {
        "ndcg5": ndcg,
        "recall_at_30pct": any30 / n,
        "recall_all_at_30pct": all30 / n,
        "recall_prefix_at_30pct": prefix30 / n,
        "recall_at_45": any45 / n,
    }


def rrf_of(signals, names) -> np.ndarray:
    fused = rrf([order_of(signals[s]) for s in names])
    return np.array([fused[i] for i in range(len(fused))])


def show(name: str, values: dict[str, float]) -> None:
    print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in values.items()), flush=True)


def fit(queries, signals, names=SIGNALS) -> dict[str, float]:
    x = np.concatenate([np.stack([standardise(signals[q.id][s]) for s in names], 1) for q in queries])
    y = np.concatenate([[q.qrel.get(i, 0) > 0 for i in range(len(q.candidates))] for q in queries])
    model = LogisticRegression(C=0.1, class_weight="balanced", max_iter=2000).fit(x, y)
    return dict(zip(names, (round(float(w), 3) for w in model.coef_[0])))


def by_halves(label: str, halves, signals, tokens, names=SIGNALS) -> dict[str, np.ndarray]:
    """Each half scored with the weights fitted on the other; the out-of-half scores of all."""
    held_out = {}
    for h in (0, 1):
        weights = fit(halves[1 - h], signals, names)
        print(f"{label}: weights fitted on half {1 - h}: {weights}", flush=True)
        scored = {q.id: fuse(signals[q.id], weights) for q in halves[h]}
        show(
            f"{label}, half {h} ({len(halves[h])} questions) by the other half's weights",
            figures(halves[h], scored, tokens),
        )
        held_out |= scored
    return held_out


def add_dense(name: str, by_filing, signals) -> float:
    """The embedder's signal of every question, one core; pages embedded per CPU second."""
    from prism.ranking.embeddings import MiniLmEmbedder, WordLlamaEmbedder

    model = MiniLmEmbedder(threads=1) if name == "minilm" else WordLlamaEmbedder()
    cpu, pages = 0.0, 0
    for texts, asked in by_filing.items():
        started = time.process_time()
        vectors = model.embed(texts)
        for q, question in zip(asked, model.embed([q.question for q in asked])):
            signals[q.id][name] = (vectors @ question).astype(float)
        cpu += time.process_time() - started
        pages += len(texts)
    return pages / cpu


def add_variants(by_filing, signals) -> float:
    """Two candidate signals, measured before any goes into the retriever: ``heading``, BM25 over
    each page's first lines; ``rows``, for metric questions, the best share of a line item's words
    that one table row (a line with figures) of the page names. Pages per CPU second."""
    from prism.ranking.lexical import _tokens
    from prism.ranking.retrieval import _METRICS, _NUMBER, HEADING_CHARS, _bm25, _index, read_question

    cpu, pages = 0.0, 0
    for texts, asked in by_filing.items():
        started = time.process_time()
        headings = _index(_tokens([t[:HEADING_CHARS] for t in texts]))
        rows, owner = [], []
        for page, text in enumerate(texts):
            for line in text.splitlines():
                words = line.split()
                if any(_NUMBER.match(w) and any(c.isdigit() for c in w) for w in words):
                    rows.append(" ".join(w for w in words if not _NUMBER.match(w)))
                    owner.append(page)
        labels = [set(r) for r in _tokens(rows)] if rows else []
        for q in asked:
            cues = read_question(q.question)
            query = _tokens([f"{q.question} {cues.expansion}"])[0]
            signals[q.id]["heading"] = _bm25(headings, query, len(texts))
            items = [set(t) for t in _tokens([w for p, _, w in _METRICS if p.search(q.question)])]
            best = np.zeros(len(texts))
            for label, page in zip(labels, owner):
                for item in items:
                    if item:
                        best[page] = max(best[page], len(item & label) / len(item))
            signals[q.id]["rows"] = best
        cpu += time.process_time() - started
        pages += len(texts)
    return pages / cpu


def main() -> None:
    flags = parser(__doc__)
    for name in DENSE:
        flags.add_argument(f"--{name}", action="store_true", help=f"{name} as one more signal")
    flags.add_argument("--variants", action="store_true", help="two more lexical signals, measured")
    args = flags.parse_args()
    queries = load_queries(PAGES)
    if args.quick:  # the questions of the first 12 filings
        first = list(dict.fromkeys(tuple(q.candidates) for q in queries))[:12]
        queries = [q for q in queries if tuple(q.candidates) in first]
    counter = TokenCounter()
    tokens = {q.id: np.array(counter.count_many(q.candidates)) for q in queries}
    by_filing = defaultdict(list)
    for q in queries:
        by_filing[tuple(q.candidates)].append(q)
    print(f"{len(queries)} questions over {len(by_filing)} filings", flush=True)

    signals, cpu, pages = {}, 0.0, 0
    for texts, asked in by_filing.items():
        started = time.process_time()
        index = FilingIndex(texts)
        for q in asked:
            signals[q.id] = index.signals(q.question)
        cpu += time.process_time() - started
        pages += len(texts)
    pages_per_s = pages / cpu

    show("bm25 (plain)", figures(queries, {q.id: bm25_scores(q.question, q.candidates) for q in queries}, tokens))
    started = time.process_time()
    hybrid = {q.id: hybrid_scores(q.question, q.candidates) for q in queries}
    hybrid_pages_per_s = sum(len(q.candidates) for q in queries) / (time.process_time() - started)
    hybrid_arrays = {k: np.array([v[i] for i in range(len(v))]) for k, v in hybrid.items()}
    show(f"hybrid bm25+lsa rrf (per query, {hybrid_pages_per_s:.0f} pages/s)", figures(queries, hybrid_arrays, tokens))
    for name in SIGNALS:
        show(f"signal {name}", figures(queries, {k: s[name] for k, s in signals.items()}, tokens))

    show("financial, signals by rrf", figures(queries, {k: rrf_of(s, SIGNALS) for k, s in signals.items()}, tokens))

    filings = sorted(by_filing, key=lambda texts: by_filing[texts][0].id)
    halves = [[q for i, f in enumerate(filings) if i % 2 == h for q in by_filing[f]] for h in (0, 1)]
    held_out = by_halves("financial", halves, signals, tokens)
    for dense in (name for name in DENSE if getattr(args, name)):
        dense_pages_per_s = add_dense(dense, by_filing, signals)
        show(
            f"{dense} alone ({dense_pages_per_s:.1f} pages/s)",
            figures(queries, {k: s[dense] for k, s in signals.items()}, tokens),
        )
        show(
            f"bm25 + {dense} rrf",
            figures(queries, {k: rrf_of(s, ("bm25", dense)) for k, s in signals.items()}, tokens),
        )
        names = (*SIGNALS, dense)
        with_dense = by_halves(f"financial-{dense}", halves, signals, tokens, names)
        show(f"financial-{dense}, both halves out-of-half", figures(queries, with_dense, tokens))
        shipped = DENSE_WEIGHTS.get(dense)
        print(f"financial-{dense} weights fitted on all: {fit(queries, signals, names)} (shipped: {shipped})")
    if args.variants:
        variants_pages_per_s = add_variants(by_filing, signals)
        print(f"variant signals: {variants_pages_per_s:.0f} pages/s on top of the index", flush=True)
        for extra in (("heading",), ("rows",), ("heading", "rows")):
            label = "financial+" + "+".join(extra)
            for name in extra:
                show(f"signal {name}", figures(queries, {k: s[name] for k, s in signals.items()}, tokens))
            show(
                f"{label}, both halves out-of-half",
                figures(queries, by_halves(label, halves, signals, tokens, (*SIGNALS, *extra)), tokens),
            )
    print(f"weights fitted on all: {fit(queries, signals)} (shipped: {WEIGHTS})", flush=True)
    show(
        "financial, shipped weights (in-sample)",
        figures(queries, {k: fuse(s, WEIGHTS) for k, s in signals.items()}, tokens),
    )
    final = figures(queries, held_out, tokens)
    show("financial, both halves out-of-half (the default)", final)
    report(
        retriever="financial",
        recall_at_30pct=round(final["recall_at_30pct"], 4),
        recall_at_45=round(final["recall_at_45"], 4),
        ndcg5=round(final["ndcg5"], 4),
        pages_per_s=round(pages_per_s),
        recall_all_at_30pct=round(final["recall_all_at_30pct"], 4),
        recall_prefix_at_30pct=round(final["recall_prefix_at_30pct"], 4),
    )


if __name__ == "__main__":
    main()
