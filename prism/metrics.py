"""Ranking metrics at a cutoff k, as the challenge scores them (ranx's definitions): NDCG with
linear gain, MRR and MAP with grade > 0 as relevant and AP divided by all relevant items."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

METRICS = ("ndcg", "mrr", "map")


def ndcg_at(ranking: Sequence[int], qrel: Mapping[int, int], k: int = 5) -> float:
    ideal = sorted((g for g in qrel.values() if g > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    dcg = sum(qrel.get(item, 0) / math.log2(pos + 2) for pos, item in enumerate(ranking[:k]) if qrel.get(item, 0) > 0)
    return dcg / sum(g / math.log2(pos + 2) for pos, g in enumerate(ideal))


def mrr_at(ranking: Sequence[int], qrel: Mapping[int, int], k: int = 5) -> float:
    return next((1 / (pos + 1) for pos, item in enumerate(ranking[:k]) if qrel.get(item, 0) > 0), 0.0)


def map_at(ranking: Sequence[int], qrel: Mapping[int, int], k: int = 5) -> float:
    relevant = sum(1 for g in qrel.values() if g > 0)
    if not relevant:
        return 0.0
    hits, total = 0, 0.0
    for pos, item in enumerate(ranking[:k]):
        if qrel.get(item, 0) > 0:
            hits += 1
            total += hits / (pos + 1)
    return total / relevant


_FUNCTIONS = {"ndcg": ndcg_at, "mrr": mrr_at, "map": map_at}


def evaluate(rankings: Mapping[str, Sequence[int]], qrels: Mapping[str, Mapping[int, int]], k: int = 5) -> dict[str, float]:
    """Mean of each metric over every query whose qrel has a relevant item. A query with no
    ranking (it failed) scores 0, so failures cannot flatter the numbers."""
    judged = [q for q in qrels if any(g > 0 for g in qrels[q].values())]
    out: dict[str, float] = {"queries": len(judged), "missing": sum(1 for q in judged if q not in rankings)}
    for name, fn in _FUNCTIONS.items():
        total = sum(fn(rankings.get(q, ()), qrels[q], k) for q in judged)
        out[f"{name}@{k}"] = total / len(judged) if judged else math.nan
    return out
