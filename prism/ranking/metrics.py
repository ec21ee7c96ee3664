"""Ranking metrics at a cutoff k, as the challenge scores them (ranx's definitions): NDCG with
linear gain, MRR and MAP with grade > 0 as relevant and AP divided by all relevant items;
evidence precision and recall, answer exact match and token F1; and the statistics of
repeated runs (mean, SD, CV, 95% CI, Welch's t-test, five-number summaries)."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
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


def evaluate(
    rankings: Mapping[str, Sequence[int]], qrels: Mapping[str, Mapping[int, int]], k: int = 5
) -> dict[str, float]:
    """Mean of each metric over every query whose qrel has a relevant item. A query with no
    ranking (it failed) scores 0, so failures cannot flatter the numbers."""
    judged = [q for q in qrels if any(g > 0 for g in qrels[q].values())]
    out: dict[str, float] = {"queries": len(judged), "missing": sum(1 for q in judged if q not in rankings)}
    for name, fn in _FUNCTIONS.items():
        total = sum(fn(rankings.get(q, ()), qrels[q], k) for q in judged)
        out[f"{name}@{k}"] = total / len(judged) if judged else math.nan
    return out


# -- evidence and answers (the Selector/Adder rounds) -----------------------------------------


def evidence_precision_recall(evidence: Sequence[int], qrel: Mapping[int, int]) -> tuple[float, float]:
    relevant = {i for i, g in qrel.items() if g > 0}
    hits = len(relevant & set(evidence))
    return (hits / len(set(evidence)) if evidence else 0.0), (hits / len(relevant) if relevant else 0.0)


def _answer_tokens(text: str) -> list[str]:
    text = re.sub(r"(?<=\d),(?=\d{3})", "", (text or "").lower())  # 1,577 -> 1577
    text = re.sub(r"[^\w\s.]", " ", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)  # keep decimal points, drop full stops
    tokens = []
    for t in text.split():
        try:
            t = f"{float(t):g}"  # 1577.00 -> 1577
        except ValueError:
            pass
        if t not in ("a", "an", "the"):
            tokens.append(t)
    return tokens


def exact_match(answer: str | None, reference: str) -> float:
    return float(_answer_tokens(answer or "") == _answer_tokens(reference))


def token_f1(answer: str | None, reference: str) -> float:
    got, want = _answer_tokens(answer or ""), _answer_tokens(reference)
    common = sum((Counter(got) & Counter(want)).values())
    if not common:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


# -- repeated runs ------------------------------------------------------------------------------


def run_statistics(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample SD, CV and the 95% confidence interval of the mean (Student t)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n if n else math.nan
    sd = statistics.stdev(values) if n > 1 else 0.0
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if n > 1 else 0.0
    return {
        "n": n,
        "mean": mean,
        "sd": sd,
        "cv": sd / mean if mean else math.nan,
        "ci95_low": float(mean - half),
        "ci95_high": float(mean + half),
    }


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's two-sample t-test (unequal variances)."""
    from scipy import stats

    result = stats.ttest_ind(a, b, equal_var=False)
    return {"t": float(result.statistic), "p": float(result.pvalue)}


def five_numbers(values: Sequence[float]) -> dict[str, float]:
    """min, Q1, median, Q3, max."""
    import numpy as np

    q = np.percentile(values, [0, 25, 50, 75, 100]) if len(values) else [math.nan] * 5
    return dict(zip(("min", "q1", "median", "q3", "max"), map(float, q)))
