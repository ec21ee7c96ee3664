"""One ranking across a question's filings, by one score."""

from prism.models import Cited
from producer.evidence import Found, across_filings


def _entries(filing: str, rank: int, score: float, ranker_scores: list[float] | None, n: int = 3) -> list[Found]:
    pair = {"filing": filing, "filing_rank": rank, "filing_score": score}
    chunk = Cited(chunk_id=f"{filing}:0", excerpt="")
    return [Found(filing, pair, p, chunk, ranker_scores[p] if ranker_scores else None, "", "llm") for p in range(n)]


def test_scores_add_up_to_one_and_a_close_filing_interleaves_a_far_one_follows():
    close = across_filings(_entries("a", 1, 3.0, None) + _entries("b", 2, 3.0, None))
    assert abs(sum(s for s, _ in close) - 1) < 1e-9
    assert [e[0] for _, e in close] == ["a", "b", "a", "b", "a", "b"]  # level filings: ranks alternate
    assert [s for s, _ in close] == sorted((s for s, _ in close), reverse=True)
    far = across_filings(_entries("a", 1, 3.0, None) + _entries("b", 2, 1.6, None))
    assert [e[0] for _, e in far] == ["a", "a", "a", "b", "b", "b"]  # another period's filing: after


def test_the_rankers_own_scores_decide_between_level_filings():
    # b's best chunk stands far above its others; a's are all alike: b's best comes first
    merged = across_filings(_entries("a", 1, 3.0, [1.0, 0.9, 0.8]) + _entries("b", 2, 3.0, [4.0, 0.5, 0.4]))
    assert (merged[0][1][0], merged[0][1][2]) == ("b", 0)
    assert merged[1][1][0] == "a"
