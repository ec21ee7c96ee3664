"""Strict ingest: content that is not what its name says, links to nothing, metadata lines that
cannot apply and files that are no filing are each named, never silently dropped."""

import gzip
import json
from pathlib import Path

import pytest

from prism.ingest.extract import IngestError
from prism.ingest.filings import source_kind
from prism.ingest.meta import parse_meta_jsonl
from prism.ingest.sniff import check_format, sniff
from producer.ingest import ingest_source
from tests.conftest import SHARED
from tests.filings import edgar_html, pdf
from workers.corpus import Corpus
from workers.store import LocalStore

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
NOTES = b"# Outlook\n\nWe expect growth.\n\n# Risks\n\nCompetition."
SGML = b"<SEC-DOCUMENT>0000950123-23-000001.txt\n<TYPE>10-K\n<TEXT>\nAnnual report of Acme.\n</TEXT>"


@pytest.mark.parametrize(
    ("data", "name", "said"),
    [
        (gzip.compress(edgar_html()), "acme.html", "named .html but the content is gzip data"),
        (pdf(["Revenue"]), "notes.txt", "named .txt but the content is a PDF"),
        (b"<!DOCTYPE html><html><body>Access denied</body></html>", "acme.pdf", "named .pdf but the content is HTML"),
        (b"PK\x03\x04rest of a zip", "acme.htm", "named .htm but the content is a zip archive"),
        (b"\x89PNG\r\n\x1a\n....", "scan.TXT", "named .txt but the content is a PNG image"),
        (b"text\x00with a NUL", "notes.txt", "named .txt but the content is binary data (NUL bytes)"),
        (NOTES, "acme.pdf", "named .pdf but the content is text"),
    ],
)
def test_content_that_is_not_what_its_name_says_is_named(data, name, said):
    with pytest.raises(IngestError) as err:
        check_format(data, source_kind(name) or "rows", name)
    assert str(err.value) == f"{name}: {said}"


def test_what_edgar_serves_passes_as_it_is():
    # SGML and plain text inside .htm, HTML inside .txt, UTF-16 HTML (NUL bytes, yet text), a PDF after blank lines
    check_format(SGML, "html", "0000950123-23-000001.htm")
    check_format(NOTES, "html", "notes.htm")
    check_format(edgar_html(), "text", "submission.txt")
    check_format("<html><body>Revenue</body></html>".encode("utf-16"), "html", "wide.html")
    check_format(b"\r\n  " + pdf(["Revenue"]), "pdf", "acme.pdf")
    check_format(gzip.compress(b"{}"), "rows", "rows.jsonl.gz")  # gzip by name
    check_format(b"", "pdf", "empty.pdf")  # the parser says it is empty
    assert [sniff(d) for d in (edgar_html(), SGML, b"\xff\xd8\xff\xe0", b"GIF89a", b"")] == [
        "HTML",
        "text",
        "JPEG",
        "GIF",
        None,
    ]


def test_a_gzip_named_html_and_a_pdf_named_txt_are_stored_failures(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "acme.html").write_bytes(gzip.compress(edgar_html()))
    (folder / "notes.txt").write_bytes(pdf(["Revenue was $10 million."]))
    (folder / "good.txt").write_bytes(NOTES)
    summary = ingest_source(folder, LocalStore(tmp_path / "corpus"))
    assert (summary.ingested, summary.failed) == (1, 2)
    failures = Corpus(LocalStore(tmp_path / "corpus")).catalog.failures()
    html, txt = (folder / "acme.html").resolve().as_posix(), (folder / "notes.txt").resolve().as_posix()
    assert failures[html].reason == "named .html but the content is gzip data"
    assert failures[txt].reason == "named .txt but the content is a PDF"


def test_a_link_to_nothing_is_named(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "good.txt").write_bytes(NOTES)
    (folder / "acme.pdf").symlink_to(tmp_path / "moved" / "acme.pdf")
    summary = ingest_source(folder, LocalStore(tmp_path / "corpus"))
    link = f"{folder.resolve().as_posix()}/acme.pdf"
    said = f"{link}: a link to {(tmp_path / 'moved' / 'acme.pdf').resolve()}, which does not exist"
    assert summary.failures == [said] and (summary.sources, summary.ingested, summary.failed) == (2, 1, 1)
    assert link in Corpus(LocalStore(tmp_path / "corpus")).catalog.failures()


def test_metadata_lines_that_cannot_apply_are_named_and_the_good_ones_apply(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    for name in ("a.txt", "b.txt"):
        (folder / name).write_bytes(NOTES)
    lines = [
        {"file": "a.txt", "company": "Acme", "form": "10-K", "gics_sector": "Industrials"},
        {"file": "gone.txt", "company": "Gone"},
        {"file": "a.txt", "company": "Other"},
        {"file": "b.txt", "compnay": "Beta", "form": "8-K"},
    ]
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    store = LocalStore(tmp_path / "corpus")
    summary = ingest_source(folder, store)
    listing = (folder / "metadata.jsonl").resolve().as_posix()
    said = {
        f"{listing} line 2": "file 'gone.txt' names no filing in the folder; ignored",
        f"{listing} line 3": "a second record for a.txt (first on line 1); ignored",
        f"{listing} line 4": "unknown key 'compnay' (did you mean 'company'?); the rest of the record applies",
    }
    assert summary.failed_sources == said and summary.failures == [f"{s}: {r}" for s, r in said.items()]
    assert {s: f.reason for s, f in Corpus(store).catalog.failures().items()} == said
    a, b = Corpus(store).get_filing("a"), Corpus(store).get_filing("b")
    assert (a.meta.company, a.meta.form_type, a.meta.extra) == ("Acme", "10-K", {"gics_sector": "Industrials"})
    assert b.meta.form_type == "8-K" and b.meta.extra == {"compnay": "Beta"}  # applied, the misspelled key unused
    # The lines fixed: their failures leave the manifest; nothing else is named.
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:1]))
    again = ingest_source(folder, store)
    assert again.failures == [] and Corpus(store).catalog.failures() == {}


def test_a_meta_jsonl_given_is_checked_against_the_folder_and_financebench_extra_keys_are_not_named(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "acme_2023_10k.txt").write_bytes(NOTES)
    meta = tmp_path / "meta.jsonl"
    meta.write_text(json.dumps({"file": "acme_2023_10k.txt", "company": "Acme"}) + "\n{" + '"file": "beta.txt"}\n')
    summary = ingest_source(folder, LocalStore(tmp_path / "corpus"), meta=meta)
    assert summary.failures == [f"{meta} line 2: file 'beta.txt' names no filing in the folder; ignored"]
    assert Corpus(LocalStore(tmp_path / "corpus")).get_filing("acme_2023_10k").meta.company == "Acme"
    # FinanceBench's own keys (doc_link, gics_sector) are data, not misspellings; its one real conflict is named.
    index, errors = parse_meta_jsonl(DOC_INFO.read_bytes(), DOC_INFO.name)
    assert [str(e) for e in errors] == [
        f"{DOC_INFO.name} line 170: a second record for FOOTLOCKER_2023_annualreport (first on line 169); ignored"
    ]
    assert index["FOOTLOCKER_2023_annualreport"]["doc_period"] == 2023 and "3M_2018_10K" in index


def test_a_meta_json_beside_nothing_or_with_a_misspelled_key_is_named(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "acme.txt").write_bytes(NOTES)
    (folder / "acme.meta.json").write_text(json.dumps({"company": "Acme", "tickr": "ACME"}))
    (folder / "acme_2023.meta.json").write_text(json.dumps({"company": "Acme"}))
    summary = ingest_source(folder, LocalStore(tmp_path / "corpus"))
    base = folder.resolve().as_posix()
    assert summary.failed_sources == {
        f"{base}/acme.meta.json": "unknown key 'tickr' (did you mean 'ticker'?); the rest of the record applies",
        f"{base}/acme_2023.meta.json": "no .pdf, .htm, .html, .txt or .jsonl of that name beside it; not used",
    }
    assert Corpus(LocalStore(tmp_path / "corpus")).get_filing("acme").meta.company == "Acme"


def test_files_that_are_no_filing_are_counted_and_named_and_hidden_ones_are_not(tmp_path):
    folder = tmp_path / "filings"
    (folder / "2023").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "a.txt").write_bytes(NOTES)
    for name in ("deck.pptx", "2023/model.xlsx", ".DS_Store", ".git/HEAD", "a.meta.jsonl"):
        (folder / name).write_bytes(b"x")
    summary = ingest_source(folder, LocalStore(tmp_path / "corpus"))
    assert [Path(u).name for u in summary.unsupported] == ["model.xlsx", "deck.pptx"]
    assert (summary.sources, summary.ingested, summary.failed) == (1, 1, 0)


def test_the_corpus_is_written_exactly_where_it_is_given(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "a.txt").write_bytes(NOTES)
    ingest_source(folder, LocalStore(tmp_path / "corpus"))
    assert sorted(p.name for p in (tmp_path / "corpus").iterdir()) == ["catalog", "filings", "inputs"]
    assert list(Corpus(LocalStore(tmp_path / "corpus")).catalog.all_filings()) == ["a"]  # every reader finds it there
    assert Corpus(LocalStore(tmp_path / "corpus")).stored_bytes() > len(NOTES)
