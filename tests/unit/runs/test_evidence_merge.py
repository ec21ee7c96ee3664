"""One ranking across a question's filings, by one score."""

from prism.models import Cited
from prism.runs.evidence import Found, across_filings


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


def test_a_chunks_change_is_its_paragraphs_and_a_gone_passage_is_a_row_of_its_earlier_chunk():
    from prism.changes.paragraphs import Change, Paragraph
    from prism.changes.redlines import removed_rows, summary
    from producer.evidence import change_counts as counts

    def para(text: str, chunk: str, page: int) -> Paragraph:
        return Paragraph(text, "Item 7. MD&A", page, chunk, 0)

    same = para("Widget demand held steady across our markets this year.", "now:1", 3)
    before = para("Widget revenue was $40,609 million for the year, from orders by industrial customers.", "then:1", 5)
    now = para("Widget revenue was $41,002 million for the year, from orders by industrial customers.", "now:1", 3)
    new = para("A new plant opened.", "now:1", 3)
    kept = summary([Change("unchanged", 1.0, same, same), Change("unchanged", 1.0, now, now)], "then")
    assert (kept["change"], kept["similarity"], kept["previous_filing"]) == ("unchanged", 1.0, "then")
    mixed = [
        Change("unchanged", 1.0, same, same),
        Change("modified", 0.8, now, before),
        Change("added", 0.1, new, None),
    ]
    found = summary(mixed, "then")
    assert found["change"] == "modified" and found["previous_page"] == 5  # the longest matched one's page
    lengths = [len(same.text), len(now.text), len(new.text)]
    assert found["similarity"] == round((lengths[0] + 0.8 * lengths[1] + 0.1 * lengths[2]) / sum(lengths), 4)
    assert found["redline"].split("\n\n")[1].startswith("Widget revenue was [-$40,609-]{+$41,002+} million for")
    assert summary([Change("added", 0.1, new, None)], "then")["change"] == "added"
    gone = [Change("removed", 0.3, None, before), Change("removed", 0.2, None, para("Gadgets ended.", "then:1", 5))]
    (row,) = removed_rows(gone, "then")  # both from one earlier chunk: one row
    assert (row["change"], row["previous_page"], row["similarity"]) == ("removed", 5, 0.3)
    assert row["redline"] == f"[-{before.text}-]\n\n[-Gadgets ended.-]"
    tally = counts(
        [{"company": "Acme", **row}, {"company": "Acme", **found}, {"company": "Acme", "change": ""}], "company"
    )
    assert (tally["Acme"]["removed"], tally["Acme"]["modified"], tally["Acme"]["unchanged"]) == (1, 1, 0)
