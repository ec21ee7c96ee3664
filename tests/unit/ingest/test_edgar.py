"""EDGAR filings in: physical pages for every marker, whole submissions, identity from the filing.

Real filings from ../shared/data/edgar (public SEC records, see its SOURCE.md) where one has the
shape; small excerpts written in their style for marker spellings none of them uses."""

import json
import re
from datetime import date

import pytest

from prism.ingest.accession import ACCESSION
from prism.ingest.extract import IngestError
from prism.ingest.filings import parse_filing
from prism.ingest.models import Chunking
from prism.ingest.pages import html_pages, text_pages
from prism.ingest.sgml import parse_submission
from prism.segmenting import TokenCounter
from tests.conftest import SHARED

EDGAR = SHARED / "edgar" / "filings"
COUNTER = TokenCounter()
TRUTH = {row["file"]: row for row in map(json.loads, (SHARED / "edgar" / "truth.jsonl").read_text().splitlines())}


def _html(body: str) -> bytes:
    return f"<html><head><title>t</title><style>p {{margin:0}}</style></head><body>{body}</body></html>".encode()


@pytest.mark.parametrize(
    "marker",
    [
        '<hr style="page-break-after:always">',
        '<div style="PAGE-BREAK-AFTER: always"></div>',
        '<p style="break-after: page"></p>',
        "<!-- PAGEBREAK -->",
    ],
)
def test_every_spelling_of_a_break_after_starts_a_new_page(marker):
    doc = html_pages(_html(f"<p>Cover of the report</p>{marker}<p>Revenue rose 12%.</p>{marker}"), "x.htm")
    # the empty piece after the last break is no page
    assert [p.text for p in doc.pages] == ["Cover of the report", "Revenue rose 12%."]


@pytest.mark.parametrize(
    "element",
    [
        '<p style="page-break-before:always">',
        '<br style="page-break-before: always">',
        '<div style="break-before:page">',
    ],
)
def test_a_break_before_any_element_puts_it_on_the_next_page(element):
    closing = "" if element.startswith("<br") else f"</{element[1 : element.index(' ')]}>"
    doc = html_pages(_html(f"<p>One</p>{element}Two{closing}<p>still two</p>"), "x.htm")
    assert [p.text.split("\n")[0] for p in doc.pages] == ["One", "Two"]
    assert "still two" in doc.pages[1].text


def test_break_values_that_are_not_breaks_and_hidden_text_are_ignored():
    body = (
        '<div style="display:none"><ix:header><ix:nonNumeric name="dei:EntityCentralIndexKey">0000320193'
        "</ix:nonNumeric></ix:header></div>"
        '<p style="page-break-inside:avoid; break-before:auto">Only page</p><script>var x = 1;</script>'
    )
    doc = html_pages(_html(body), "x.htm")
    assert [p.text for p in doc.pages] == ["Only page"]
    assert doc.facts == {"EntityCentralIndexKey": "0000320193"}  # read before the hidden header is dropped


WORDS = ["Revenue rose.", "Costs fell.", "Cash grew.", "Debt was repaid.", "Margins widened."]


def test_running_headers_are_dropped_and_printed_numbers_kept():
    pages = [f"<p>Apple Inc. | 2024 Form 10-K | {30 + i}</p><p>{w}</p>" for i, w in enumerate(WORDS)]
    doc = html_pages(_html('<hr style="page-break-after:always">'.join(pages)), "x.htm")
    assert [p.text for p in doc.pages] == WORDS
    assert [p.printed for p in doc.pages] == [str(n) for n in range(30, 35)]
    footers = [f"<p>{w}</p><p>{i + 1}</p>" for i, w in enumerate(WORDS)]
    doc = html_pages(_html('<hr style="page-break-after:always">'.join(footers)), "x.htm")
    assert [(p.text, p.printed) for p in doc.pages] == [(w, str(i + 1)) for i, w in enumerate(WORDS)]


def test_plain_text_pages_at_page_lines_and_form_feeds():
    pages = text_pages("cover\n<PAGE>   2\nsecond\n\n<PAGE>\nthird")
    assert [(p.text, p.printed) for p in pages] == [("cover", None), ("second", "2"), ("third", None)]
    assert [p.text for p in text_pages("one\fsecond\f\f")] == ["one", "second"]


def test_printed_page_numbers_split_a_filing_without_markers():
    dashed = "\n".join(f"{' ' * 30}-{n}-\n\n{w}" for n, w in enumerate(WORDS, start=1))
    assert [(p.printed, p.text) for p in text_pages(dashed)] == [(str(n), w) for n, w in enumerate(WORDS, start=1)]
    footers = "\n".join(f"{w}\nPage {n}" for n, w in enumerate(WORDS, start=1))
    assert [(p.text, p.printed) for p in text_pages(footers)] == [(w, str(n)) for n, w in enumerate(WORDS, start=1)]
    # numbers that do not rise as pages do are table values, not folios
    table = "Revenue\n12\nCost\n7\nProfit\n5"
    assert len(text_pages(table)) == 1


def test_fixed_width_text_keeps_its_columns():
    page = text_pages("      Revenue      1,200     1,100\n      Cost           700       650\n")[0]
    assert page.text.split("\n") == ["Revenue      1,200     1,100", "Cost           700       650"]


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_real_filings_pages_documents_and_identity_match_the_truth(name):
    truth = TRUTH[name]
    filing = parse_filing((EDGAR / name).read_bytes(), name, counter=COUNTER)
    assert filing.pages == truth["pages"]
    readable = [(d.type, list(d.pages)) for d in filing.documents if d.pages]
    assert readable == [(d["type"], d["pages"]) for d in truth["documents"] if d["pages"]]
    assert filing.meta.form_type == truth["form"]
    assert (
        str(filing.meta.period_end) == str(truth["period_end"]) if truth["period_end"] else not filing.meta.period_end
    )
    if truth["cik"] and name.endswith(".txt") or "10q" in name:
        assert filing.meta.cik == truth["cik"]
    # a chunk never spans pages, every page has one, and each carries its document
    assert {c.page for c in filing.chunks} == set(range(1, truth["pages"] + 1))
    assert all(c.document for c in filing.chunks)


def test_a_submission_skips_binaries_and_xbrl_and_lists_them():
    name = "bcow-8k-2024-12-27_0000943374-24-000509.txt"
    filing = parse_filing((EDGAR / name).read_bytes(), name, counter=COUNTER)
    skipped = {d.filename: d.skipped for d in filing.documents if d.skipped}
    # decoded whole (a broken block would fail the filing), then listed with its size
    for binary in ("Financial_Report.xlsx", "0000943374-24-000509-xbrl.zip"):
        assert re.fullmatch(r"uuencoded binary of [\d,]+ bytes", skipped[binary]), skipped[binary]
        assert int(skipped[binary].split()[3].replace(",", "")) > 1000
    assert skipped["R1.htm"] and skipped["bcow-20241220.xsd"] and skipped["MetaLinks.json"]
    text = "\n".join(c.text for c in filing.chunks)
    assert "begin 644" not in text and "<xbrl" not in text.lower() and "xmlns" not in text
    assert filing.tokens < 6000  # the 8-K's three pages, not 160 KB of markup and binaries


def test_a_submissions_exhibit_pages_continue_after_the_form():
    name = "cvr-energy-sc-to-t-a-2025-01-10_0001104659-25-002604.txt"
    filing = parse_filing((EDGAR / name).read_bytes(), name, counter=COUNTER)
    exhibit = [c for c in filing.chunks if c.document == "EX-99.(A)(5)(C)"]
    assert {c.page for c in exhibit} == {11, 12}
    # the header names the subject company of a tender offer, not its filer
    assert filing.meta.company == "CVR ENERGY INC" and filing.meta.cik == "0001376139"
    assert filing.meta.origins["company"] == "sgml-header" and filing.meta.filed == date(2025, 1, 10)
    assert "company" not in filing.meta.guessed


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_the_accession_number_is_read_from_the_sec_header_or_the_path(name):
    """As EDGAR names a submission (its file or folder), or as its SEC header states it; a filing
    that states none has none (nothing is made up)."""
    filing = parse_filing((EDGAR / name).read_bytes(), name, counter=COUNTER)
    named = ACCESSION.findall(name)
    assert filing.meta.accession == (named[-1] if named else None)
    if filing.meta.accession:
        assert filing.meta.origins["accession"] in ("sgml-header", "path") and "accession" not in filing.meta.guessed
    header = (EDGAR / name).read_bytes()[:4000]
    if b"ACCESSION NUMBER:" in header:
        assert filing.meta.origins["accession"] == "sgml-header"


def test_identity_from_dei_facts_from_the_cover_and_the_order_of_trust():
    name = "orcl-8k-2024-11-18.html"
    filing = parse_filing((EDGAR / name).read_bytes(), name, counter=COUNTER)
    meta = filing.meta
    assert (meta.company, meta.cik, meta.form_type) == ("ORACLE CORP", "0001341439", "8-K")
    assert meta.period_end == date(2024, 11, 14)  # an 8-K's period is its event date
    assert meta.origins["company"] == "dei" and meta.guessed == []
    cover = parse_filing((EDGAR / "sophiris-8k-2016-03-23_0001437749-16-028287.html").read_bytes(), "s.html")
    assert (cover.meta.company, cover.meta.period_end) == ("Sophiris Bio Inc.", date(2016, 3, 23))
    assert cover.meta.origins["company"] == "cover" and "company" in cover.meta.guessed
    given = parse_filing((EDGAR / name).read_bytes(), name, {"company": "Oracle"}, counter=COUNTER)
    assert given.meta.company == "Oracle" and given.meta.origins["company"] == "metadata"
    old = parse_filing((EDGAR / "page-america-s-3a-1995-05-25_0000899681-95-000096.txt").read_bytes(), "p.txt")
    # no SEC header: the first document's type is the form; the registrant line is not the rule under it
    assert (old.meta.form_type, old.meta.company, old.meta.filed) == (
        "S-3/A",
        "PAGE AMERICA GROUP, INC.",
        date(1995, 5, 25),
    )


def test_versions_follow_the_text_not_the_bytes():
    name = "lge-ku-8k-2003-03-25_0001104659-03-004925.html"
    data = (EDGAR / name).read_bytes()
    first = parse_filing(data, name, counter=COUNTER)
    rewritten = data.replace(b"<html>", b"<html><!-- generated 2026-12-05T02:00:00Z -->", 1)
    assert rewritten != data and parse_filing(rewritten, name, counter=COUNTER).version == first.version
    edited = data.replace(b"Sarbanes-Oxley", b"Sarbanes Oxley")
    assert edited != data
    assert parse_filing(edited, name, counter=COUNTER).version != first.version
    assert parse_filing(data, name, chunking=Chunking(chunk_tokens=64), counter=COUNTER).version != first.version


def test_a_long_table_cut_into_chunks_repeats_its_column_header():
    rows = "\n".join(f"Segment {i}      {i},100      {i},050" for i in range(1, 80))
    text = f"Revenue by segment\n\n(in millions)      2025      2024\n{rows}"
    filing = parse_filing(text.encode(), "t.txt", chunking=Chunking(chunk_tokens=120), counter=COUNTER)
    table = [c for c in filing.chunks if "Segment" in c.text]
    assert len(table) >= 3 and all("(in millions)      2025      2024\nSegment " in c.text for c in table)
    assert all(c.tokens <= 120 for c in filing.chunks)


def test_a_submission_with_no_readable_document_fails_naming_it():
    data = b"<SEC-DOCUMENT>\n<DOCUMENT>\n<TYPE>GRAPHIC\n<FILENAME>logo.jpg\n<TEXT>\nbegin 644 logo.jpg\nM\nend\n</TEXT>\n</DOCUMENT>\n"
    assert parse_submission(data).documents[0].skipped == "uuencoded binary"
    with pytest.raises(IngestError, match="^sub.txt: no readable document"):
        parse_filing(data, "sub.txt", counter=COUNTER)


PRESS_RELEASE = """<html><body><p>Exhibit 99.1</p>
<p>Sophiris Bio Reports Fourth Quarter and Full Year 2015 Financial Results</p>
<p>Net loss for the year ended December 31, 2015 was $9.7 million.</p></body></html>"""


def test_an_exhibit_in_its_own_file_joins_its_filing_by_accession_number(tmp_path):
    from producer.ingest import ingest_source
    from workers.corpus import Corpus
    from workers.store import LocalStore

    folder = tmp_path / "in"
    folder.mkdir()
    form = "sophiris-8k-2016-03-23_0001437749-16-028287.html"
    (folder / form).write_bytes((EDGAR / form).read_bytes())
    (folder / "sophiris_0001437749-16-028287_ex99-1.htm").write_text(PRESS_RELEASE)
    store = LocalStore(tmp_path / "corpus")
    summary = ingest_source(folder, store)
    assert (summary.ingested, summary.failed) == (1, 0)
    filing = Corpus(store).get_filing(form.removesuffix(".html"))
    assert [(d.type, d.pages) for d in filing.documents] == [("8-K", (1, 3)), ("EX-99.1", (4, 4))]
    release = [c for c in filing.chunks if c.document == "EX-99.1"]
    assert release and all(c.page == 4 for c in release) and "$9.7 million" in release[0].text
    # an EDGAR index page beside them gives the exhibit's type; it is no filing of its own
    (folder / "sophiris_0001437749-16-028287_ex99-1.htm").rename(folder / "release.htm")
    (folder / "0001437749-16-028287").mkdir()
    for name in (form, "release.htm"):
        (folder / name).rename(folder / "0001437749-16-028287" / name)
    (folder / "0001437749-16-028287" / "0001437749-16-028287-index.htm").write_text(
        "<table class='tableFile'><tr><th>Seq</th><th>Description</th><th>Document</th><th>Type</th></tr>"
        f"<tr><td>1</td><td>8-K</td><td><a href='x'>{form}</a></td><td>8-K</td></tr>"
        "<tr><td>2</td><td>PRESS RELEASE</td><td><a href='y'>release.htm</a></td><td>EX-99.1</td></tr></table>"
    )
    store = LocalStore(tmp_path / "corpus2")
    summary = ingest_source(folder, store)
    assert (summary.ingested, summary.failed, summary.unsupported) == (1, 0, [])
    filing = Corpus(store).get_filing(form.removesuffix(".html"))
    assert [(d.type, d.pages) for d in filing.documents] == [("8-K", (1, 3)), ("EX-99.1", (4, 4))]


def test_shapes_met_in_other_real_filings():
    # an ownership report's header names the ISSUER, not the reporting owner
    form4 = (
        b"<SEC-DOCUMENT>\n<SEC-HEADER>\nCONFORMED SUBMISSION TYPE:\t4\nREPORTING-OWNER:\n\n\tOWNER DATA:\n"
        b"\t\tCOMPANY CONFORMED NAME:\t\t\tDOE JANE\n\t\tCENTRAL INDEX KEY:\t\t\t0001234567\n\nISSUER:\n\n"
        b"\tCOMPANY DATA:\n\t\tCOMPANY CONFORMED NAME:\t\t\tAAR CORP\n\t\tCENTRAL INDEX KEY:\t\t\t0000001750\n"
        b"</SEC-HEADER>\n<DOCUMENT>\n<TYPE>EX-24\n<TEXT>\nPower of attorney.\n</TEXT>\n</DOCUMENT>\n"
    )
    meta = parse_filing(form4, "f4.txt", counter=COUNTER).meta
    assert (meta.company, meta.cik, meta.form_type) == ("AAR CORP", "0000001750", "4")
    # a 20-F cover without "the"; a 6-K names its registrant "(Registrant Name)"
    cover = "FORM 20-F\nFor fiscal year ended December 31, 2015\nALCON INC.\n(Registrant Name)\n"
    meta = parse_filing(cover.encode(), "c.txt", counter=COUNTER).meta
    assert (meta.period_end, meta.company) == (date(2015, 12, 31), "ALCON INC.")
    # zero-width spacer cells and bottom-aligned value cells keep a row on one line
    row = (
        "<table><tr><td><p>Other assets</p></td><td valign='bottom'>4,307</td>"
        "<td valign='bottom'>\u200b4,295\u200b</td></tr></table>"
    )
    assert html_pages(_html(row), "r.htm").pages[0].text == "Other assets 4,307 4,295"
    # mirrored footers on left and right pages are one running line, read for the page number
    pages = [
        f"<p>{w}</p><p>{n}    CABOT CORPORATION</p>" if n % 2 == 0 else f"<p>{w}</p><p>CABOT CORPORATION    {n}</p>"
        for n, w in enumerate(WORDS, start=4)
    ]
    doc = html_pages(_html('<hr style="page-break-after:always">'.join(pages)), "x.htm")
    assert [(p.text, p.printed) for p in doc.pages] == [(w, str(n)) for n, w in enumerate(WORDS, start=4)]
    # a form after </html> (some SEC renderings) is read as a browser shows it
    after = b"<html><head><style>p {}</style></head></html><div><p>Transfer agent registration.</p></div>"
    assert [p.text for p in html_pages(after, "ta1.htm").pages] == ["Transfer agent registration."]
    # a 1990s text document's <TABLE>/<S>/<C> tags are column marks, not HTML: its layout stays
    text = b"<DOCUMENT>\n<TYPE>8-K\n<TEXT>\n<TABLE>\n<S>               <C>\nRevenue           1,200\nCost                700\n</TABLE>\n<PAGE>   2\nSigned.\n</TEXT>\n</DOCUMENT>\n"
    filing = parse_filing(text, "old.txt", counter=COUNTER)
    assert filing.pages == 2 and "Revenue           1,200\nCost                700" in filing.chunks[0].text


def test_a_pdf_regenerated_with_the_same_text_keeps_its_version():
    import io

    import pypdf

    from tests.filings import pdf

    data = pdf(["Revenue was $10 million.", "Net income was $2 million."])
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(data))
    writer.add_metadata({"/Producer": "regenerated", "/CreationDate": "D:20261205020000Z"})
    out = io.BytesIO()
    writer.write(out)
    assert out.getvalue() != data
    first = parse_filing(data, "acme_2023_10K.pdf", counter=COUNTER)
    again = parse_filing(out.getvalue(), "acme_2023_10K.pdf", counter=COUNTER)
    assert again.version == first.version and again.content_sha256 != first.content_sha256
