import random

import pytest
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

from prism.ranking.metrics import evaluate
from prism.ranking.rankers import document_lexical_ranker
from tests.conftest import DOC_DEV, PAGES, load


def ranx_scores(rankings, qrels):
    run = Run({q: {str(i): float(len(r) - pos) for pos, i in enumerate(r)} for q, r in rankings.items()})
    qr = Qrels({q: {str(i): g for i, g in rel.items() if g > 0} for q, rel in qrels.items()})
    return ranx_evaluate(qr, run, ["ndcg@5", "mrr@5", "map@5"])


@pytest.mark.parametrize("source", ["documents-lexical", "documents-random", "pages-random"])
def test_metrics_match_ranx_on_the_shared_data(source):
    rng = random.Random(3)
    queries = load(DOC_DEV) if source.startswith("documents") else load(PAGES, limit=40)
    if source == "documents-lexical":
        ranker = document_lexical_ranker()
        rankings = {q.id: ranker.rank(q.question, q.candidates, 5).indices for q in queries}
    else:
        rankings = {q.id: rng.sample(range(len(q.candidates)), min(10, len(q.candidates))) for q in queries}
    qrels = {q.id: q.qrel for q in queries}
    ours, theirs = evaluate(rankings, qrels), ranx_scores(rankings, qrels)
    assert ours["queries"] == len(queries) and ours["missing"] == 0
    for name in ("ndcg@5", "mrr@5", "map@5"):
        assert ours[name] == pytest.approx(theirs[name], abs=1e-9)


def test_a_missing_ranking_scores_zero():
    qrels = {"a": {0: 2, 1: 0}, "b": {1: 1, 0: 0}}
    out = evaluate({"a": [0, 1]}, qrels)
    assert out["missing"] == 1 and out["ndcg@5"] == pytest.approx(0.5)
