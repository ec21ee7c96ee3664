import gzip
import io
import json
from datetime import date
from itertools import islice

import pytest

from prism.datasets import load_queries
from prism.ingest.chunking import is_heading, sections
from prism.ingest.extract import IngestError
from prism.ingest.filings import filings_from_rows, parse_filing, source_kind
from prism.ingest.meta import meta_from_record, parse_meta_jsonl
from prism.ingest.models import Chunking
from prism.models import FILING_TYPES, form_type
from prism.segmenting import TokenCounter
from tests.conftest import PAGES, SHARED
from tests.filings import edgar_html, encrypted, pdf

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
COUNTER = TokenCounter()


def test_pdf_pages_become_chunks_with_stable_ids_and_empty_pages_flagged():
    data = pdf(["Revenue was $10 million in 2023.", None, "Net income was $2 million."], image_pages=frozenset({1}))
    filing = parse_filing(data, "acme_2023_10K.pdf", counter=COUNTER)
    assert [c.id for c in filing.chunks] == ["acme_2023_10K:p1", "acme_2023_10K:p2", "acme_2023_10K:p3"]
    assert [c.page for c in filing.chunks] == [1, 2, 3] and [c.index for c in filing.chunks] == [0, 1, 2]
    assert {c.document for c in filing.chunks} == {"10-K"} and filing.documents[0].pages == (1, 3)
    assert "Revenue was $10 million" in filing.chunks[0].text
    assert filing.chunks[1].text == "" and filing.chunks[1].flags == ["empty"]
    assert filing.chunks[0].flags == [] and filing.chunks[0].tokens > 5
    assert filing.tokens == sum(c.tokens for c in filing.chunks)
    assert (filing.pages, filing.empty_pages) == (3, 1) and "empty_pages" in filing.flags
    assert filing.meta.company == "acme" and filing.meta.form_type == "10-K" and filing.meta.fiscal_year == 2023
    assert set(filing.meta.guessed) == {"company", "form_type", "fiscal_year"}
    # Same bytes, same version; other bytes or other metadata, another.
    assert parse_filing(data, "acme_2023_10K.pdf", counter=COUNTER).version == filing.version
    other = pdf(["Revenue was $11 million in 2023.", None, "Net income was $2 million."])
    assert parse_filing(other, "acme_2023_10K.pdf", counter=COUNTER).version != filing.version
    assert parse_filing(data, "acme_2023_10K.pdf", {"company": "Acme"}, counter=COUNTER).version != filing.version


def test_pdf_with_an_empty_user_password_opens_and_a_locked_one_fails():
    data = pdf(["Cash flow from operations rose."])
    opened = parse_filing(encrypted(data, ""), "open.pdf", counter=COUNTER)
    assert "Cash flow from operations rose." in opened.chunks[0].text
    with pytest.raises(IngestError) as err:
        parse_filing(encrypted(data, "hunter2"), "locked.pdf", counter=COUNTER)
    assert str(err.value) == "locked.pdf: the PDF is encrypted with a password"


def test_image_only_and_broken_pdfs_fail_with_the_file_and_the_reason():
    with pytest.raises(IngestError, match=r"^scan\.pdf: no text on any of its 2 pages \(image-only"):
        parse_filing(pdf([None, None], image_pages=frozenset({0, 1})), "scan.pdf", counter=COUNTER)
    good = pdf(["Some text."])
    with pytest.raises(IngestError, match=r"^broken\.pdf: named \.pdf but the content is text$"):
        parse_filing(b"this is not a PDF", "broken.pdf", counter=COUNTER)
    with pytest.raises(IngestError, match=r"^broken\.pdf: not a readable PDF"):
        parse_filing(good[: len(good) // 2], "broken.pdf", counter=COUNTER)
    with pytest.raises(IngestError, match="not a .pdf"):
        parse_filing(b"x", "notes.docx")


def test_edgar_html_keeps_item_headings_as_sections():
    filing = parse_filing(edgar_html(), "acme-10k.htm", counter=COUNTER)
    headings = [c.heading for c in filing.chunks]
    assert list(dict.fromkeys(headings)) == [
        None,
        "Item 1. Business",
        "ITEM 1A. RISK FACTORS",
        "Item 7. Management\u2019s Discussion and Analysis of Financial Condition",
    ]
    business = next(c for c in filing.chunks if c.heading == "Item 1. Business")
    assert business.id == "acme-10k:p1.2" and business.section == 2 and business.page == 1
    # "PART I" directly above "Item 1." joins its section; windows-1252 dashes are decoded.
    assert business.text.startswith("PART I\n\nItem 1. Business\n") and "widgets \u2013 many" in business.text
    cover = filing.chunks[0]
    assert "Item 1A. Risk Factors 9" in cover.text  # the table of contents stays in the cover, not a heading
    assert filing.meta.form_type == "10-K" and filing.meta.period_end == date(2023, 12, 31)
    assert filing.meta.fiscal_year == 2023 and filing.meta.company == "ACME WIDGETS, INC."
    assert {"form_type", "period_end", "fiscal_year", "company"} == set(filing.meta.guessed)


def test_sections_are_cut_into_token_sized_chunks():
    filing = parse_filing(
        edgar_html(risk_paragraphs=12), "acme-10k.html", chunking=Chunking(chunk_tokens=64), counter=COUNTER
    )
    risks = [c for c in filing.chunks if c.heading == "ITEM 1A. RISK FACTORS"]
    assert len(risks) >= 4
    parts = [int(c.id.removeprefix("acme-10k:p1.")) for c in risks]  # one page: parts of page 1, in order
    assert parts == list(range(parts[0], parts[0] + len(risks))) and {c.section for c in risks} == {3}
    assert all(c.tokens <= 64 for c in filing.chunks)
    assert [c.index for c in filing.chunks] == list(range(len(filing.chunks)))
    text = "\n".join(c.text for c in risks)
    assert all(f"Risk {i}:" in text for i in range(1, 13))
    # The chunk size is part of the version.
    assert parse_filing(edgar_html(risk_paragraphs=12), "acme-10k.html", counter=COUNTER).version != filing.version


def test_a_paragraph_longer_than_a_chunk_is_cut_at_token_boundaries_and_flagged():
    words = " ".join(f"word{i}" for i in range(400))
    filing = parse_filing(
        f"# Notes\n\n{words}".encode(), "long.txt", chunking=Chunking(chunk_tokens=64), counter=COUNTER
    )
    assert {c.heading for c in filing.chunks} == {"Notes"}
    split = [c for c in filing.chunks if "split" in c.flags]
    assert len(split) >= 4 and all(c.tokens <= 64 for c in split)
    assert "".join(c.text for c in split) == words


def test_plain_text_encodings_and_bad_text():
    text = parse_filing("Caf\xe9 revenue \u2013 up".encode("cp1252"), "n.txt", counter=COUNTER)
    assert text.chunks[0].text == "Caf\xe9 revenue \u2013 up" and "decoded_cp1252" in text.flags
    with pytest.raises(IngestError, match=r"^bin\.txt: named \.txt but the content is binary data \(NUL bytes\)$"):
        parse_filing(b"\x00\x01\x02", "bin.txt")
    with pytest.raises(IngestError, match="^blank.txt: the file holds no text"):
        parse_filing(b" \n\n ", "blank.txt")


def test_headings():
    assert is_heading("Item 1A. Risk Factors") and is_heading("ITEM 7A: QUANTITATIVE DISCLOSURES")
    assert is_heading("PART II") and is_heading("Part I \u2014 Financial Information") and is_heading("## Notes")
    assert not is_heading("Item 7 of this report describes the results.")
    assert not is_heading("Item 1A. Risk Factors 12")  # a table-of-contents line
    assert [s.heading for s in sections("intro\nItem 1. Business\nwe sell\nItem 2. Properties\nwe own")] == [
        None,
        "Item 1. Business",
        "Item 2. Properties",
    ]


def test_metadata_records_are_read_and_bad_fields_named():
    meta = meta_from_record({"company": "Acme", "doc_type": "10q", "period": "2023Q2", "cik": 123}, "s3://b/x", "x")
    assert (meta.form_type, meta.fiscal_year, meta.fiscal_quarter, meta.cik) == ("10-Q", 2023, 2, "0000000123")
    assert meta.extra == {} and meta.origins == {}
    assert meta.guessed == []
    assert meta_from_record({"period": "2022-09-30"}, "u", "x").period_end == date(2022, 9, 30)
    assert meta_from_record({"period": "FY2018"}, "u", "x").fiscal_year == 2018
    with pytest.raises(IngestError, match=r"^x\.meta\.json: metadata field 'fiscal_year'"):
        meta_from_record({"fiscal_year": "soon"}, "u", "x.meta.json")
    with pytest.raises(IngestError, match=r"metadata field 'period': 'next spring'"):
        meta_from_record({"period": "next spring"}, "u", "x")
    with pytest.raises(IngestError, match=r"metadata field 'tags': expected a string"):
        meta_from_record({"tags": ["a"]}, "u", "x")
    assert [form_type(v) for v in ("10k", "10K_annualreport", "8-K", "DEF 14A", "earnings", "S-1")] == [
        "10-K",
        "10-K",
        "8-K",
        "DEF14A",
        "Earnings",
        "S-1",
    ]
    index, errors = parse_meta_jsonl(b'{"doc_name": "a", "company": "A"}\nnot json\n{"company": "B"}\n', "m.jsonl")
    assert list(index) == ["a"] and [e.source for e in errors] == ["m.jsonl line 2", "m.jsonl line 3"]


def test_source_kinds_by_suffix_in_any_case():
    kinds = [source_kind(n) for n in ("a.PDF", "b.Htm", "c.html", "d.TXT", "e.jsonl", "f.JSONL.GZ", "g.doc")]
    assert kinds == ["pdf", "html", "html", "text", "rows", "rows", None]
    assert [source_kind(n) for n in ("a.meta.json", "metadata.jsonl", "x.meta.jsonl")] == [None, None, None]


def test_financebench_page_rows_become_filings_with_pages_as_chunks():
    with gzip.open(PAGES, "rb") as f:
        lines = list(islice(f, 6))
    index, errors = parse_meta_jsonl(DOC_INFO.read_bytes(), DOC_INFO.name)
    assert [e.source for e in errors] == [f"{DOC_INFO.name} line 170"]  # FOOTLOCKER_2023 twice: the first stands
    rows = filings_from_rows(io.BytesIO(b"".join(lines)), "pages.jsonl", index, COUNTER)
    queries = load_queries_from(lines)
    names = [json.loads(line)["doc_name"] for line in lines]
    assert [f.id for f in rows.filings] == list(dict.fromkeys(names))  # a doc_name asked twice: one filing
    assert rows.questions == {q.id: name for q, name in zip(queries, names)}
    for query, name in zip(queries, names):
        filing = next(f for f in rows.filings if f.id == name)
        assert [c.text for c in filing.chunks] == query.candidates
        relevant = next(i for i, grade in query.qrel.items() if grade)
        chunk = filing.chunks[relevant]
        assert (chunk.id, chunk.page, chunk.index) == (f"{name}:p{relevant + 1}", relevant + 1, relevant)
    first = rows.filings[0]
    info = index[first.id]
    assert first.meta.company == info["company"] and first.meta.fiscal_year == info["doc_period"]
    assert first.meta.form_type == form_type(info["doc_type"]) and first.meta.extra["doc_link"] == info["doc_link"]
    assert "fiscal_year" not in first.meta.guessed and "company" not in first.meta.guessed


def load_queries_from(lines: list[bytes]):
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        tmp.write(b"".join(lines))
        tmp.flush()
        return load_queries(tmp.name)


def test_chunk_rows_with_identical_candidates_share_one_filing():
    def row(qid: str, candidates: list[str]) -> str:
        return json.dumps({"id": qid, "question": f"question {qid}?", "candidates": candidates})

    same, other = ["alpha text", "beta text", ""], ["gamma text", "delta text"]
    data = "\n".join([row("q1", same), row("q2", same), row("q3", other), "{broken", row("q4", list(FILING_TYPES))])
    rows = filings_from_rows(io.BytesIO(data.encode()), "rows.jsonl", counter=COUNTER)
    assert len(rows.filings) == 2
    shared = rows.filings[0]
    assert shared.id.startswith("rows-") and rows.questions["q1"] == rows.questions["q2"] == shared.id
    assert rows.questions["q3"] == rows.filings[1].id != shared.id
    assert [c.id for c in shared.chunks] == [f"{shared.id}:c1", f"{shared.id}:c2", f"{shared.id}:c3"]
    assert shared.chunks[2].flags == ["empty"] and shared.chunks[0].page is None
    assert [e.source for e in rows.errors] == ["rows.jsonl line 4"] and "not valid JSON" in rows.errors[0].reason
    assert rows.document_rows == 1 and "q4" not in rows.questions  # filing types, not a filing
    # A filing already stored at this version is not rebuilt; its questions still map to it.
    versions = {f.id: f.version for f in rows.filings}
    again = filings_from_rows(io.BytesIO(data.encode()), "rows.jsonl", counter=COUNTER, latest=versions.get)
    assert again.filings == [] and again.unchanged == list(versions) and again.questions == rows.questions
