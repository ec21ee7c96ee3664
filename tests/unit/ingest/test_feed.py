"""EDGAR's feed in: `.nc` dissemination files, and archives of filings (a daily feed's
`.nc.tar.gz`, a `.tar`, a `.zip`) read where they lie, filtered by form, company or an EDGAR
index, their bad members named while the rest ingests.

The `.nc` files are real (../shared/data/edgar-nc, see its SOURCE.md); the archives hold copies of
the real filings under new accession numbers (prism/testing/feed.py)."""

import io
import json
import tarfile
import zipfile
from datetime import date

import pytest

from prism.corpus.edgar import parse_index
from prism.corpus.filters import Selection
from prism.ingest.archives import list_archive
from prism.ingest.filings import parse_filing
from prism.ingest.sgml import head_fields, parse_submission
from prism.segmenting import TokenCounter
from prism.testing.feed import Copy, bases_in, copies, form_index, write_archive
from producer.archives import Filter
from producer.ingest import ingest_source
from tests.conftest import SHARED
from workers.corpus import Corpus
from workers.store import LocalStore

FEED = SHARED / "edgar-nc"
TRUTH = {row["file"]: row for row in map(json.loads, (FEED / "truth.jsonl").read_text().splitlines()) if row}
COUNTER = TokenCounter()
DAY = date(2024, 3, 1)


@pytest.fixture(scope="module")
def day() -> list[Copy]:
    """Twelve filings of one feed day (a .nc and a .txt of each small base), every third a 10-K."""
    bases = [b for b in bases_in(SHARED / "edgar" / "filings", FEED) if len(b.documents) < 300_000]
    return list(copies(bases, 12, DAY, ten_k_every=3))


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_a_feed_file_gives_its_identity_from_its_header_and_its_pages(name):
    truth = TRUTH[name]
    filing = parse_filing((FEED / name).read_bytes(), name, counter=COUNTER)
    meta = filing.meta
    assert (meta.company, meta.cik, meta.form_type) == (truth["company"], truth["cik"], truth["form"])
    assert meta.accession == truth["accession"] and f"{meta.filed:%Y%m%d}" == truth["filed"]
    if truth["period"]:
        assert f"{meta.period_end:%Y%m%d}" == truth["period"]
    assert len(filing.documents) == truth["documents"]
    binaries = [d for d in filing.documents if (d.skipped or "").startswith("uuencoded binary of ")]
    pdfs = [d for d in filing.documents if d.filename and d.filename.lower().endswith(".pdf")]
    assert len(binaries) + len(pdfs) == truth["uuencoded"]
    assert filing.pages >= 1 and {c.page for c in filing.chunks} == set(range(1, filing.pages + 1))
    assert "begin 644" not in "\n".join(c.text for c in filing.chunks)


@pytest.mark.parametrize("path", sorted(FEED.glob("*.nc")) + sorted((SHARED / "edgar" / "filings").glob("*.txt")))
def test_a_header_read_from_the_first_bytes_is_the_whole_files_header(path):
    data = path.read_bytes()
    assert head_fields(data[:16384]) == parse_submission(data).header


def test_a_broken_uuencoded_block_fails_the_filing_naming_its_line():
    data = _lines((FEED / "0001493152-25-001317.nc").read_bytes())
    begin = data.index(b"begin 644")
    line = data.index(b"\n", data.index(b"\n", begin) + 1)  # the second line of the block
    broken = (
        data[: line + 1]
        + b"M!!!not uuencode at all, ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
        + data[line + 1 :]
    )
    with pytest.raises(Exception, match=r"uuencoded block breaks at line \d+"):
        parse_filing(broken, "broken.nc", counter=COUNTER)


def _lines(data: bytes) -> bytes:
    """A feed file's lines ended by LF (some end theirs by a bare CR)."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _filings(corpus: Corpus) -> dict[str, dict]:
    """What a corpus holds of each filing, apart from where it was read from."""
    out = {}
    for fid, head in corpus.catalog.all_filings().items():
        filing = corpus.get_filing(fid, head.latest)
        meta = filing.meta.model_dump(exclude={"source_uri"})
        out[fid] = {"meta": meta, "pages": filing.pages, "chunks": [c.text for c in filing.chunks]}
    return out


@pytest.mark.parametrize("suffix", ["nc.tar.gz", "tar", "zip"])
def test_an_archive_ingests_as_its_unpacked_folder_does(tmp_path, day, suffix):
    folder = tmp_path / "day"
    folder.mkdir()
    for c in day:
        (folder / c.name).write_bytes(c.data)
    archive = write_archive(tmp_path / f"20240301.{suffix}", [(f"20240301/{c.name}", c.data) for c in day])
    unpacked = ingest_source(folder, LocalStore(tmp_path / "from-folder"), counter=COUNTER)
    packed = ingest_source(archive, LocalStore(tmp_path / "from-archive"), counter=COUNTER)
    assert packed.failures == [] and packed.ingested == unpacked.ingested == len(day)
    assert packed.opened == len(day) and packed.pages == unpacked.pages
    assert _filings(Corpus(LocalStore(tmp_path / "from-archive"))) == _filings(
        Corpus(LocalStore(tmp_path / "from-folder"))
    )
    sources = Corpus(LocalStore(tmp_path / "from-archive")).catalog.sources()
    assert list(sources) == [str(archive)]  # the archive is one source: its members' entries folded in
    assert sources[str(archive)].entry is not None and len(sources[str(archive)].entry.filings) == len(day)
    again = ingest_source(archive, LocalStore(tmp_path / "from-archive"), counter=COUNTER)
    assert (again.sources, again.skipped, again.opened, again.unchanged) == (1, 1, 0, len(day))


@pytest.mark.parametrize("with_index", [False, True])
def test_a_filter_takes_the_forms_it_names_exactly_and_reads_no_other_member(tmp_path, day, with_index):
    bases = bases_in(FEED)
    amended = list(copies(bases, 3, DAY, ten_k_every=1, label="10-K/A", start=100))  # not 10-Ks
    members = day + amended
    archive = write_archive(tmp_path / "day.nc.tar.gz", [(c.name, c.data) for c in members])
    rows = {row.accession: row for row in parse_index(form_index(members))} if with_index else None
    chosen = Filter(Selection(forms=frozenset({"10-K"})), rows)
    store = LocalStore(tmp_path / "corpus")
    summary = ingest_source(archive, store, counter=COUNTER, chosen=chosen)
    ten_ks = [c for c in day if c.form == "10-K"]
    assert summary.ingested == summary.opened == len(ten_ks) == 4  # no other member was read
    assert summary.left_out == len(members) - len(ten_ks) and summary.failures == []
    corpus = Corpus(store)
    assert {
        corpus.get_filing(fid, head.latest).meta.accession for fid, head in corpus.catalog.all_filings().items()
    } == {c.accession for c in ten_ks}
    again = ingest_source(archive, store, counter=COUNTER, chosen=chosen)
    assert (again.skipped, again.opened, again.left_out) == (1, 0, summary.left_out)


def test_a_filter_by_company_takes_a_question_sets_companies_by_name_and_ciks_by_number(tmp_path, day):
    archive = write_archive(tmp_path / "day.zip", [(c.name, c.data) for c in day])
    by_name = Filter(Selection(companies=("Oracle",)))
    oracle = ingest_source(archive, LocalStore(tmp_path / "oracle"), counter=COUNTER, chosen=by_name)
    assert oracle.ingested == len([c for c in day if c.company == "Oracle Corporation"]) > 0
    avid = next(c for c in day if c.company.startswith("Avid"))
    by_cik = Filter(Selection(ciks=frozenset({int(avid.cik)})))
    taken = ingest_source(archive, LocalStore(tmp_path / "avid"), counter=COUNTER, chosen=by_cik)
    assert taken.ingested == len([c for c in day if c.cik == avid.cik]) and taken.left_out == len(day) - taken.ingested


def _corrupt_zip(data: bytes) -> bytes:
    """A zip whose first member's compressed bytes are damaged (its CRC no longer holds)."""
    at = data.index(b"PK\x03\x04") + 30 + int.from_bytes(data[26:28], "little") + 200
    return data[:at] + bytes(b ^ 0x5A for b in data[at : at + 64]) + data[at + 64 :]


def _tar_with(names: list[str], data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_bad_archives_and_members_are_named_failures_and_the_rest_ingests(tmp_path, day):
    good = day[1].data
    broken_nc = _lines((FEED / "0001493152-25-001317.nc").read_bytes()).replace(b"\nend\n", b"\n", 1)
    folder = tmp_path / "in"
    folder.mkdir()
    whole = write_archive(tmp_path / "whole.tar.gz", [(c.name, c.data) for c in day[:6]]).read_bytes()
    (folder / "cut.nc.tar.gz").write_bytes(whole[: len(whole) * 2 // 3])  # truncated mid-stream
    zipped = write_archive(tmp_path / "z.zip", [("a.nc", day[0].data), ("b.txt", good)]).read_bytes()
    (folder / "corrupt.zip").write_bytes(_corrupt_zip(zipped))
    write_archive(folder / "broken.tar", [("broken.nc", broken_nc), ("fine.txt", good)])
    (folder / "escape.tar").write_bytes(_tar_with(["../outside.nc", "/abs.nc"], good))
    (folder / "latin.tar").write_bytes(
        _tar_with(["caf\xe9.nc"], good)  # a Latin-1 name: not UTF-8
    )
    with zipfile.ZipFile(folder / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb.nc", b"\0" * (64 * 1024 * 1024))
    write_archive(folder / "bomb.tar.gz", [("zeros.nc", b"\0" * (160 * 1024 * 1024)), ("after.txt", good)], level=9)
    (folder / b"r\xe9sum\xe9.txt".decode("utf-8", "surrogateescape")).write_bytes(good)  # a Latin-1 file name
    summary = ingest_source(folder, LocalStore(tmp_path / "corpus"), counter=COUNTER)
    reasons = summary.failed_sources
    said = {uri.removeprefix(f"{folder}/"): why for uri, why in reasons.items()}
    assert "truncated or corrupt tar.gz archive" in said["cut.nc.tar.gz"]
    assert "is corrupt" in said["corrupt.zip#a.nc"]
    assert "uuencoded block" in said["broken.tar#broken.nc"]
    assert said["escape.tar#../outside.nc"] == said["escape.tar#/abs.nc"] == "its name escapes the archive's folder"
    assert "not valid UTF-8" in said["latin.tar#caf\\xe9.nc"]
    assert "expands" in said["bomb.zip#bomb.nc"] and "expands" in said["bomb.tar.gz#zeros.nc"]
    assert "not valid UTF-8" in said["r\\xe9sum\\xe9.txt"]
    # the rest ingests: the two whole members before the cut (the third is cut short, and named),
    # and the good member beside each bad one
    assert "is cut short" in said["cut.nc.tar.gz#" + day[2].name]
    assert summary.ingested == 2 + 1 + 1 + 1, (summary.ingested, said)
    assert not (tmp_path / "outside.nc").exists() and not (tmp_path / "in" / "outside.nc").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "in", "whole.tar.gz", "z.zip"]
    listing = list_archive(io.BytesIO(whole[: len(whole) * 2 // 3]), "tar.gz", "cut")
    assert listing.error and 0 < len(listing.members) < 6
