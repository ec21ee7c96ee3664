import math
import random
import statistics

import numpy as np
import pytest
from scipy import stats

from prism.ranking.embeddings import local_embedder
from prism.ranking.hybrid import HybridRanker, lsa_scores, prefilter, rrf, within_budget
from prism.ranking.icl import ExampleStore, ExampleStoreError, gold_ranking
from prism.ranking.metrics import evidence_precision_recall, exact_match, five_numbers, run_statistics, token_f1, welch
from tests.conftest import DOC_DEV, PAGES, load


@pytest.fixture(scope="module")
def store() -> ExampleStore:
    return ExampleStore.build(load(DOC_DEV, limit=120), local_embedder("hashed"))


def test_examples_never_include_the_query_itself_or_its_duplicates(store):
    embedder = local_embedder("hashed")
    for q in load(DOC_DEV, limit=30):
        vector = embedder.embed([q.question])[0]
        found = store.nearest(vector, 5, q.id, q.question)
        assert len(found) == 5
        assert all(e["id"] != q.id and e["question"] != q.question for e in found)
        # Unguarded, the nearest neighbour is the row itself.
        assert store.nearest(vector, 1, None, "some other text")[0]["id"] == q.id


def test_examples_come_from_the_task_asked_for():
    docs, pages = load(DOC_DEV, limit=40), load(PAGES, limit=6)
    mixed = ExampleStore.build([*docs, *pages], local_embedder("hashed"))
    vector = local_embedder("hashed").embed([pages[0].question])[0]
    # Unfiltered, a page question's nearest examples include page rows; asked for documents, none.
    assert any(e["task"] == "chunks" for e in mixed.nearest(vector, 5, None, ""))
    found = mixed.nearest(vector, 5, None, "", task="documents")
    assert len(found) == 5 and {e["task"] for e in found} == {"documents"}
    only_pages = mixed.nearest(vector, 10, pages[0].id, pages[0].question, task="chunks")
    assert {e["id"] for e in only_pages} == {p.id for p in pages[1:]}  # all there are, less the query


def test_examples_are_the_gold_rankings_and_round_trip_through_plain_files(store):
    q = load(DOC_DEV, limit=1)[0]
    assert store.examples[0]["answer"] == gold_ranking(q) == sorted(q.qrel, key=lambda i: (-q.qrel[i], i))
    again = ExampleStore.from_files(store.to_files())
    vector = local_embedder("hashed").embed(["How did analysts question the outlook?"])[0]
    assert again.nearest(vector, 3, None, "") == store.nearest(vector, 3, None, "")
    text = store.format(store.nearest(vector, 2, None, ""))
    assert text.count("\n- ") == 2 and "Earnings" in text or "10-K" in text
    files = store.to_files()
    files["examples.jsonl"] = files["examples.jsonl"].replace(b'"answer": [', b'"answer": [0, ', 1)
    with pytest.raises(ExampleStoreError, match="changed"):
        ExampleStore.from_files(files)


def test_reciprocal_rank_fusion():
    scores = rrf([[2, 0, 1], [0, 1, 2]], weights=[1.0, 0.5])
    assert scores[0] == pytest.approx(1 / 62 + 0.5 / 61)
    assert max(scores, key=scores.get) == 2 or max(scores, key=scores.get) == 0
    assert rrf([[1, 0]], k=0)[1] == 1.0


def test_prefilter_keeps_m_chunks_in_filing_order_and_finds_the_obvious_one():
    texts = [f"page {i} about the weather and the office lease" for i in range(40)]
    texts[27] = "capital expenditures: purchases of property, plant and equipment were $1,577 million"
    kept = prefilter("What were capital expenditures?", texts, 10)
    assert len(kept) == 10 and kept == sorted(kept) and 27 in kept
    assert prefilter("anything", texts[:5], 10) == [0, 1, 2, 3, 4]
    assert HybridRanker().rank("capital expenditures", texts, 3).indices[0] == 27
    assert np.argmax(lsa_scores("capital expenditures property plant", texts)) == 27


def test_prefilter_by_share_fills_the_share_of_tokens_best_first():
    texts = [f"page {i} about the weather and the office lease" for i in range(40)]
    texts[27] = "capital expenditures: purchases of property, plant and equipment were $1,577 million"
    texts[5] = "capital expenditures " + "and more filler " * 200  # the second best, and too big
    costs = [len(t.split()) for t in texts]
    kept = prefilter("What were capital expenditures?", texts, share=0.3, costs=costs)
    assert 27 in kept and 5 not in kept and kept == sorted(kept)
    assert sum(costs[i] for i in kept) <= 0.3 * sum(costs)
    assert sum(costs[i] for i in kept) > 0.3 * sum(costs) - max(costs[i] for i in range(40) if i != 5)
    # When no chunk fits, the filing keeps its best one rather than nothing.
    assert prefilter("What were capital expenditures?", texts[:2], share=0.1, costs=[10, 10]) == [0]
    with pytest.raises(ValueError, match="token count"):
        prefilter("q", texts, share=0.3)
    assert within_budget([2, 0, 1], [5, 3, 6], 10) == [2, 1]  # 0 no longer fits; 1 does
    assert within_budget([2, 0, 1], [3, 6, 5], 10) == [2, 0]


def test_the_hybrid_pre_filter_keeps_most_evidence_pages_in_a_third():
    pages = load(PAGES)
    recall = []
    for q in pages:
        relevant = {i for i, g in q.qrel.items() if g > 0}
        kept = set(prefilter(q.question, q.candidates, max(1, len(q.candidates) * 3 // 10)))
        recall.append(len(relevant & kept) / len(relevant))
    assert sum(recall) / len(recall) > 0.75  # 0.787 on the 129 FinanceBench questions


def test_run_statistics_and_welch_match_scipy():
    rng = random.Random(5)
    a = [0.68 + rng.gauss(0, 0.01) for _ in range(5)]
    b = [0.71 + rng.gauss(0, 0.01) for _ in range(9)]
    st = run_statistics(a)
    assert st["mean"] == pytest.approx(statistics.mean(a)) and st["sd"] == pytest.approx(statistics.stdev(a))
    assert st["cv"] == pytest.approx(st["sd"] / st["mean"])
    low, high = stats.t.interval(0.95, len(a) - 1, loc=statistics.mean(a), scale=stats.sem(a))
    assert (st["ci95_low"], st["ci95_high"]) == pytest.approx((low, high))
    test = welch(a, b)
    expected = stats.ttest_ind(a, b, equal_var=False)
    assert test["p"] == pytest.approx(expected.pvalue) and test["p"] < 0.05
    assert five_numbers([5, 1, 3, 2, 4]) == {"min": 1, "q1": 2, "median": 3, "q3": 4, "max": 5}
    assert run_statistics([0.5])["sd"] == 0 and math.isnan(run_statistics([0.0, 0.0])["cv"])


def test_evidence_and_answer_scores():
    assert evidence_precision_recall([3, 7], {3: 2, 9: 2, 7: 0}) == (0.5, 0.5)
    assert evidence_precision_recall([], {3: 2}) == (0.0, 0.0)
    assert exact_match("$1,577.00 million", "$1577 million") == 1.0
    assert exact_match("No.", "Yes") == 0.0
    assert token_f1("capex was 1577 million", "1577 million") == pytest.approx(2 * (2 / 4) * 1 / (2 / 4 + 1))
