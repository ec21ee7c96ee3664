import math
import random

from prism.segmenting import TokenCounter, plan_segments


def test_token_counts_are_exact_with_the_shipped_vocabulary():
    counter = TokenCounter()
    assert counter.exact
    # o200k_base: "hello world" is two tokens, " world" one.
    assert counter.count("hello world") == 2
    assert counter.count_many(["hello world", ""]) == [2, 0]
    long = "revenue grew " * 100
    assert counter.count(counter.truncate(long, 10)) == 10


def test_estimate_is_conservative_when_no_encoding():
    counter = TokenCounter("no_such_encoding")
    assert not counter.exact
    text = "Total revenue was $1,234 million in fiscal 2023, up 5% from the prior year."
    assert counter.count(text) >= TokenCounter().count(text)


def test_segments_cover_every_item_in_order_within_budget():
    rng = random.Random(7)
    for _ in range(500):
        costs = [rng.randint(1, 60) for _ in range(rng.randint(1, 80))]
        budget = rng.randint(60, 400)
        segments = plan_segments(range(len(costs)), costs, budget)
        assert [i for s in segments for i in s] == list(range(len(costs)))
        assert all(sum(costs[i] for i in s) <= budget for s in segments)
        assert len(segments) <= 2 * math.ceil(sum(costs) / budget)


def test_segments_are_even_not_greedy():
    assert plan_segments(range(10), [5] * 10, 20) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert plan_segments([4, 8, 9], {4: 3, 8: 3, 9: 3}, 100) == [[4, 8, 9]]
