"""What changed since the previous filing: paragraphs, sections by name, matching, the figure
rule and the redline (prism/changes/paragraphs.py). Texts are from NVIDIA's 10-Q for the quarter ended
July 27, 2025 (shared/data/edgar) unless said otherwise."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from prism.changes.paragraphs import (
    COUNTERPART_MIN,
    PROSE_WORDS,
    Paragraph,
    compare,
    in_chunks,
    paragraphs,
    redline,
    section_key,
)
from prism.changes.redlines import Compared
from prism.ingest.filings import parse_filing
from prism.ingest.models import Chunk, Filing
from prism.models import JobResult, Ranking

RISK_10Q = "Part II, Item 1A. Risk Factors"
RISK_10K = "Item 1A. Risk Factors"
MDNA_10Q = "Item 2. Management's Discussion and Analysis of Financial Condition and Results of Operations"
MDNA_10K = "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations"

EXPORT = (
    "Export controls could disrupt our supply chain and distribution channels, negatively impacting our ability "
    "to serve demand, including in markets outside China and for our gaming products. The possibility of "
    "additional export controls has negatively impacted and may in the future negatively impact demand for our "
    "products, benefiting competitors that offer alternatives less likely to be restricted by further controls."
)
DIFFUSION = (
    "In May 2025, the USG announced that it would rescind the AI Diffusion IFR and implement a replacement rule. "
    "The scope, timing, and requirements of the forthcoming rule remain uncertain."
)
TAIWAN = (
    "Finally, our business depends on our ability to receive consistent and reliable supply from our overseas "
    "partners, especially in Taiwan and South Korea. Any new restrictions that negatively impact our ability to "
    "receive supply of components, parts, or services from Taiwan and South Korea, would negatively impact our "
    "business and financial results."
)
LEASES = (
    "Operating lease expenses were $ 109 million and $ 84 million for the second quarter, and $ 210 million and "
    "$ 164 million for the first half, of fiscal years 2026 and 2025, respectively."
)
H20 = (
    "As a result of these new requirements, we incurred a $4.5 billion charge in the first quarter of fiscal year "
    "2026 associated with H20 for excess inventory and purchase obligations, as the demand for H20 diminished."
)
NEW_RISK = (  # Verizon's 2022 10-K (FinanceBench): another company's risk, with no counterpart here
    "A significant portion of our workforce is represented by labor unions, and we could incur additional costs "
    "or experience work stoppages as a result of the renegotiation of our labor contracts."
)


def para(text: str, heading: str | None, position: int, page: int = 1) -> Paragraph:
    return Paragraph(text, heading, page, f"f:p{page}.1", position)


def test_section_keys_match_by_name_across_10q_and_10k():
    assert section_key(RISK_10Q) == section_key(RISK_10K) == "risk factors"
    assert section_key(MDNA_10Q) == section_key(MDNA_10K) == "mdna"
    assert section_key("Item 1. Financial Statements (Unaudited)") == "financial statements"
    assert section_key("Item 8. Financial Statements and Supplementary Data") == "financial statements"
    # titles broken or cut by PDF and HTML extraction, as Oracle's 10-Q and Corning's 2021 10-K have them
    assert section_key("Item 1A. Ri sk Factors") == "risk factors"
    assert section_key("Item 7. Management") == "mdna"
    assert section_key("ITEM 3. QUANTITATIVE AND QUALITATIVE DISCLOSURES ABOUT MARKET RISK") == section_key(
        "Item 7A. Quantitative and Qualitative Disclosures About Market Risk"
    )
    assert section_key("Item 15. Exhibits and Financial Statement Schedules") == "exhibits"
    # no title: the item number, with its part when given
    assert section_key("Part II, Item 1A.") == "part ii item 1a"
    assert section_key(None) is None


def test_a_paragraph_matches_its_counterpart_in_its_own_section_first():
    # the previous filing states the export risk in Risk Factors and, a word apart, in MD&A
    mdna_version = EXPORT.replace("gaming products", "gaming GPUs")
    previous = [para(EXPORT, RISK_10K, 0), para(mdna_version, MDNA_10K, 1, page=30)]
    current = [para(EXPORT, MDNA_10Q, 5, page=25)]
    [change] = compare(current, previous)
    assert change.previous is not None and change.previous.heading == MDNA_10K
    assert change.change == "modified"
    assert "[-GPUs.-]{+products.+}" in change.redline  # the word that differs
    # with no counterpart in its own section it is found in another
    [moved] = compare([para(TAIWAN, MDNA_10Q, 0)], [para(TAIWAN, RISK_10K, 4), para(EXPORT, MDNA_10K, 9)])
    assert moved.change == "unchanged" and moved.previous is not None and moved.previous.heading == RISK_10K


def test_10q_risk_factors_and_mdna_meet_the_10k_items_of_the_same_name():
    previous = [para(DIFFUSION, MDNA_10K, 0), para(DIFFUSION, RISK_10K, 1, page=20)]
    current = [para(DIFFUSION, RISK_10Q, 0, page=40), para(DIFFUSION, MDNA_10Q, 1, page=24)]
    changes = compare(current, previous)
    assert [c.previous.heading for c in changes if c.previous] == [RISK_10K, MDNA_10K]
    assert [c.change for c in changes] == ["unchanged", "unchanged"]


def test_a_changed_figure_is_modified_and_marked_even_when_every_word_is_the_same():
    # a made-up sentence first, then a real one
    before = "Total revenue was $40,609 million for the quarter, up from the prior year."
    after = "Total revenue was $41,002 million for the quarter, up from the prior year."
    [change] = compare([para(after, MDNA_10Q, 0)], [para(before, MDNA_10K, 0), para(LEASES, MDNA_10K, 1)])
    assert change.change == "modified"
    assert change.similarity >= COUNTERPART_MIN
    assert "[-$40,609-]{+$41,002+}" in change.redline
    # a real paragraph with one amount altered
    changed = LEASES.replace("$ 210 million", "$ 215 million")
    [real] = compare([para(changed, MDNA_10Q, 0)], [para(LEASES, MDNA_10K, 3)])
    assert real.change == "modified" and "[-210-]{+215+}" in real.redline


def test_figures_written_differently_are_the_same_figures():
    # made up: the same figures, written with and without thousands commas and a space before "%"
    before = "Total revenue was $40,609 million, or 23 % of the total, as of July 27, 2025."
    after = "Total revenue was $40609 million, or 23% of the total, as of July 27, 2025."
    [change] = compare([para(after, None, 0)], [para(before, None, 0)])
    assert change.change == "unchanged" and change.similarity == 1.0
    assert "$40609" in change.redline and "40,609" not in change.redline  # the figure is not marked


def test_words_a_pdf_broke_with_a_space_are_the_same_words():
    # American Water Works' 2021 and 2022 10-Ks (FinanceBench), as pypdf extracted them
    before = "Presented in the table be low is a summary of the major items affecting the Company’s cash flows from investing activities:"
    after = before.replace("be low", "below")
    [change] = compare([para(after, MDNA_10Q, 0)], [para(before, MDNA_10K, 0)])
    assert change.change == "unchanged" and change.similarity == 1.0 and change.redline == after
    [reworded] = compare([para(after.replace("major", "main"), MDNA_10Q, 0)], [para(before, MDNA_10K, 0)])
    assert reworded.change == "modified" and "[-major-]{+main+}" in reworded.redline


def test_a_paragraph_moved_to_another_page_is_unchanged():
    previous = [para(EXPORT, RISK_10K, 0, page=35), para(TAIWAN, RISK_10K, 1, page=37), para(H20, RISK_10K, 2, page=36)]
    current = [para(TAIWAN, RISK_10Q, 14, page=41), para(H20, RISK_10Q, 3, page=36)]
    changes = compare(current, previous)
    assert [c.change for c in changes] == ["unchanged", "unchanged"]
    assert changes[0].previous == previous[1] and changes[0].redline == TAIWAN  # no marks


def test_added_and_removed_rows():
    previous = [para(EXPORT, RISK_10K, 0), para(TAIWAN, RISK_10K, 1), para(H20, MDNA_10K, 2)]
    current = [para(EXPORT, RISK_10Q, 0), para(NEW_RISK, RISK_10Q, 1)]
    changes = compare(current, previous, previous_cited=previous[:2])
    assert [(c.change, c.current, c.previous) for c in changes] == [
        ("unchanged", current[0], previous[0]),
        ("added", current[1], None),
        ("removed", None, previous[1]),  # cited before, no counterpart now; H20 was not cited
    ]
    assert changes[1].similarity < COUNTERPART_MIN
    assert changes[1].redline == "{+" + NEW_RISK + "+}" and changes[2].redline == "[-" + TAIWAN + "-]"


def test_each_previous_paragraph_serves_one_current_paragraph():
    previous = [para(DIFFUSION, RISK_10K, 0)]
    current = [para(DIFFUSION, RISK_10Q, 0), para(DIFFUSION, RISK_10Q, 7)]
    changes = compare(current, previous, previous)
    assert [c.change for c in changes] == ["unchanged", "added"]


def page(number: int, text: str, heading: str | None = None) -> Chunk:
    return Chunk(id=f"f:p{number}", index=number - 1, page=number, text=text, tokens=0, heading=heading)


def test_furniture_is_left_out():
    # a made-up running head on every page and a printed page number or contents line at each foot
    furniture = ["12", "Page 12", "F-3", "- 12 -", "Table of Contents"]
    chunks = [
        page(n, f"NVIDIA Corporation | Form 10-Q\n{DIFFUSION if n % 2 else TAIWAN}\n{furniture[n - 1]}")
        for n in range(1, 6)
    ]
    found = paragraphs(chunks)
    assert [p.text for p in found] == [DIFFUSION, TAIWAN, DIFFUSION, TAIWAN, DIFFUSION]
    assert [p.page for p in found] == [1, 2, 3, 4, 5]
    # a short line repeated on two pages only is kept: it may be text
    kept = paragraphs([page(1, f"Overview\n{DIFFUSION}"), page(2, f"Overview\n{TAIWAN}")])
    assert kept[0].text.startswith("Overview\n")


def wrapped(text: str, width: int = 80) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line]


def test_pdf_lines_wrapped_at_a_width_are_one_paragraph_and_a_page_break_does_not_cut_it():
    export, taiwan = wrapped(EXPORT), wrapped(TAIWAN)
    first = "\n".join(["ITEM 1A. RISK FACTORS", *export, *taiwan[:2]])
    second = "\n".join([*taiwan[2:], *wrapped(H20)])
    found = paragraphs([page(1, first), page(2, second)])
    assert [p.text for p in found] == [EXPORT, TAIWAN, H20]
    assert {section_key(p.heading) for p in found} == {"risk factors"}
    assert found[1].chunk_ids == ("f:p1", "f:p2")
    assert in_chunks(found, {"f:p2"}) == found[1:]


def test_html_chunk_text_gives_its_paragraphs_and_keeps_a_table_whole():
    text = (
        "Note 14 - Leases\nOur lease obligations primarily consist of operating leases for our offices and data "
        "centers, with lease periods expiring between fiscal years 2026 and 2041.\n\n"
        "Operating Lease Obligations\n(In millions)\nFiscal Year:\n2026 (excluding the first half of fiscal year "
        "2026) $ 174\n2027 418\n2028 397\nTotal 2,544\n\n" + LEASES
    )
    found = paragraphs([page(23, text, "Item 1. Financial Statements (Unaudited)")])
    assert [p.text.split("\n")[0] for p in found] == ["Note 14 - Leases", "Operating Lease Obligations", LEASES]
    assert found[1].text.endswith("Total 2,544")
    assert all(section_key(p.heading) == "financial statements" for p in found)


def test_redline_marks_words_like_git_word_diff():
    assert redline(DIFFUSION, DIFFUSION) == DIFFUSION
    assert redline("sales grew 5% in fiscal 2025", "sales grew 7% in fiscal 2026") == (
        "sales grew [-5%-]{+7%+} in fiscal [-2025-]{+2026+}"
    )
    assert redline("we may rescind the rule", "we rescind the rule") == "we [-may-] rescind the rule"
    assert redline("the rule", "the new rule") == "the {+new+} rule"
    assert redline("Revenue $ 40,609", "Revenue $ 40609") == "Revenue $ 40609"  # the same figure


# -- a chunk's edge moved: what the earlier evidence cited is still in the filing -----------------


def chunk(chunk_id: str, text: str, heading: str | None = RISK_10K) -> Chunk:
    return Chunk(id=chunk_id, index=int(chunk_id[-1]), page=35, text=text, tokens=0, heading=heading)


def test_a_cited_paragraph_a_chunk_edge_moved_out_of_the_cited_chunk_is_not_removed():
    # the previous filing's first chunk ends with the AI Diffusion paragraph; the current one
    # opens its second chunk with it, word for word: the chunk's edge moved by one paragraph
    before = paragraphs([chunk("f:c1", f"{EXPORT}\n\n{DIFFUSION}"), chunk("f:c2", f"{TAIWAN}\n\n{H20}")])
    now = paragraphs([chunk("f:c1", EXPORT, RISK_10Q), chunk("f:c2", f"{DIFFUSION}\n\n{TAIWAN}\n\n{H20}", RISK_10Q)])
    changes = compare(in_chunks(now, {"f:c1"}), before, in_chunks(before, {"f:c1"}), whole=now)
    assert [(c.change, c.current, c.previous) for c in changes] == [("unchanged", now[0], before[0])]
    # reworded and moved out of the cited chunk, it is still there too (modified, not cited)
    reworded = [*now[:1], replace(now[1], text=DIFFUSION.replace("remain uncertain", "are not yet known"))]
    assert compare(in_chunks(reworded, {"f:c1"}), before, in_chunks(before, {"f:c1"}), whole=reworded) == changes


def test_a_cited_paragraph_truly_deleted_is_still_removed():
    before = paragraphs([chunk("f:c1", f"{EXPORT}\n\n{DIFFUSION}"), chunk("f:c2", f"{TAIWAN}\n\n{H20}")])
    now = paragraphs([chunk("f:c1", EXPORT, RISK_10Q), chunk("f:c2", f"{DIFFUSION}\n\n{H20}", RISK_10Q)])
    changes = compare(in_chunks(now, {"f:c1"}), before, in_chunks(before, {"f:c1", "f:c2"}), whole=now)
    assert [(c.change, c.previous.text if c.previous else None) for c in changes] == [
        ("unchanged", EXPORT),
        ("removed", TAIWAN),  # in no chunk of the current filing; DIFFUSION and H20 are, uncited
    ]
    # one of two near copies cited before, one left now: that one is the counterpart of the copy
    export_too = EXPORT.replace("gaming products", "gaming GPUs")
    before = paragraphs([chunk("f:c1", f"{DIFFUSION}\n\n{EXPORT}\n\n{export_too}")])
    now = paragraphs([chunk("f:c1", DIFFUSION, RISK_10Q), chunk("f:c2", EXPORT, RISK_10Q)])
    changes = compare(in_chunks(now, {"f:c1"}), before, before, whole=now)
    assert [(c.change, c.previous.text if c.previous else None) for c in changes] == [
        ("unchanged", DIFFUSION),
        ("removed", export_too),
    ]


def nvidia_10q() -> Filing:
    """NVIDIA's 10-Q for the quarter ended July 27, 2025, as ingest reads it (the bundled copy)."""
    source = Path(__file__).parents[3] / "prism" / "data" / "edgar" / "filings" / "nvda-10q-2025-08-27.html"
    return parse_filing(source.read_bytes(), str(source), {})


def next_version(filing: Filing, chunk_id: str, moved: bool) -> Filing:
    """The filing again with the last paragraph of a chunk moved to the start of the next chunk
    (the chunk's edge moved by one paragraph), or deleted."""
    chunks = list(filing.chunks)
    at = next(i for i, c in enumerate(chunks) if c.id == chunk_id)
    *kept, last = chunks[at].text.split("\n\n")
    chunks[at] = chunks[at].model_copy(update={"text": "\n\n".join(kept)})
    if moved:
        chunks[at + 1] = chunks[at + 1].model_copy(update={"text": f"{last}\n\n{chunks[at + 1].text}"})
    return filing.model_copy(update={"id": "nvda-next", "version": "v2", "chunks": chunks})


def ranked(query_id: str, index: int) -> JobResult:
    at = datetime(2025, 9, 1, tzinfo=UTC)
    ranking = Ranking(indices=[index])
    return JobResult(
        run_id="r",
        job_id=query_id,
        query_id=query_id,
        task="chunks",
        ranker="financial",
        n_candidates=1,
        ranking=ranking,
        started_at=at,
        finished_at=at,
    )


def test_the_evidence_of_a_real_filing_whose_cited_chunk_lost_a_paragraph_to_its_neighbour():
    earlier = nvidia_10q()
    cited = next(c for c in earlier.chunks if section_key(c.heading) == "risk factors" and c.text.count("\n\n") == 2)
    last = cited.text.split("\n\n")[-1]
    assert len(last.split()) > PROSE_WORDS  # a paragraph, not a heading line
    index = earlier.chunks.index(cited)
    pairs = [
        {"filing": "nvda-next", "version": "v2", "query_id": "q@nvda-next", "previous": earlier.id},
        {"filing": earlier.id, "version": earlier.version, "query_id": "q@nvda", "previous_of": "nvda-next"},
    ]
    results = {"q@nvda": ranked("q@nvda", index), "q@nvda-next": ranked("q@nvda-next", index)}
    for moved, gone in ((True, []), (False, [last])):
        now = next_version(earlier, cited.id, moved)
        filings = {(earlier.id, earlier.version): earlier, ("nvda-next", "v2"): now}
        rows = [{"filing_id": "nvda-next", "chunk_id": cited.id, "question_id": "q", "question": "?", "company": "N"}]
        removed = Compared(filings, results).rows(pairs, rows)
        assert rows[0]["change"] == "unchanged"  # the paragraphs it still has are as they were
        assert [r["redline"] for r in removed] == [f"[-{p}-]" for p in gone]
        assert all(r["change"] == "removed" and r["previous_filing"] == earlier.id for r in removed)
