"""A filing as stored in the corpus: its metadata, its chunks with stable ids, and its version."""

from __future__ import annotations

import hashlib
import json
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SourceKind = Literal["pdf", "html", "text", "rows"]
# empty: the chunk holds no text (a PDF page with no text layer, e.g. a scanned image);
# split: a paragraph too long for one chunk was cut at token boundaries.
ChunkFlag = Literal["empty", "split"]
# empty_pages: some pages hold no text (kept, flagged); guessed_metadata: some metadata fields
# come from the file name or the text, not from a metadata file (FilingMeta.guessed says which).
FilingFlag = Literal["empty_pages", "guessed_metadata", "decoded_cp1252"]
# The metadata fields a filing can have guessed.
MetaField = Literal[
    "company", "form_type", "fiscal_year", "fiscal_quarter", "period_end", "cik", "ticker", "filed", "accession"
]
# Where a metadata field came from, most trusted first; "cover" and "file-name" are guesses.
# path: an accession number in the file's or its folder's name, as EDGAR names them (not a guess)
MetaOrigin = Literal["metadata", "sgml-header", "dei", "cover", "file-name", "path"]
GUESSED_ORIGINS: frozenset[str] = frozenset({"cover", "file-name"})
# html, text, pdf: read into pages; the rest are kept out of the text and listed as skipped.
DocumentKind = Literal["html", "text", "pdf", "xbrl-xml", "binary", "other"]


CHUNK_TOKENS = 512  # an HTML or text filing's chunk: about a paragraph or two
CHUNK_TOKENS_RANGE = (32, 32_000)


class Chunking(BaseModel):
    """How HTML and text are cut (PDFs are always cut into pages). Part of a filing's version."""

    model_config = ConfigDict(frozen=True)

    chunk_tokens: int = Field(default=CHUNK_TOKENS, ge=CHUNK_TOKENS_RANGE[0], le=CHUNK_TOKENS_RANGE[1])
    encoding: str = "o200k_base"


class FilingMeta(BaseModel):
    company: str | None = None
    form_type: str | None = None  # one of prism.models.FILING_TYPES when known ("10-K", "10-Q", ...)
    fiscal_year: int | None = Field(None, ge=1900, le=2200)
    fiscal_quarter: int | None = Field(None, ge=1, le=4)
    period_end: date | None = None  # the period reported on; an 8-K's event date
    cik: str | None = None  # SEC Central Index Key, ten digits with leading zeros
    ticker: str | None = None
    filed: date | None = None  # the date EDGAR accepted it
    accession: str | None = None  # EDGAR's accession number, 0001234567-24-000123
    source_uri: str
    name: str | None = None  # the filing's own name (file stem, FinanceBench doc_name)
    guessed: list[MetaField] = []  # fields taken from the cover page or the file name, not given or declared
    origins: dict[str, MetaOrigin] = {}  # field -> where its value came from
    extra: dict[str, str | int | float | bool | None] = {}  # other fields of the metadata file, kept as given


class Chunk(BaseModel):
    # "<filing_id>:p12" (page 12), "<filing_id>:s3.2" (section 3, part 2) or "<filing_id>:c7"
    # (candidate 7 of a benchmark row); numbers from 1.
    id: str
    index: int  # 0-based position in the filing: the candidate index a ranking returns
    page: int | None = None  # 1-based physical page: as a PDF viewer shows it; across a submission's documents
    printed_page: str | None = None  # the page number printed on that page ("12", "F-3"), when it prints one
    document: str | None = None  # the document of a submission it comes from ("10-Q", "EX-99.1")
    section: int | None = None  # 1-based section number (text before the first heading is section 1 when any)
    heading: str | None = None  # the section's heading line ("Item 1A. Risk Factors")
    text: str
    tokens: int
    flags: list[ChunkFlag] = []


class Document(BaseModel):
    """One document of a filing (an EDGAR submission holds the form and its exhibits), in file order."""

    type: str  # "10-Q", "EX-99.1", "GRAPHIC"
    sequence: int | None = None
    filename: str | None = None
    description: str | None = None
    kind: DocumentKind
    pages: tuple[int, int] | None = None  # its first and last physical page; None when it gave none
    skipped: str | None = None  # why its content is not in the text ("uuencoded binary", "XBRL")


class Filing(BaseModel):
    id: str = Field(min_length=1)
    version: str  # digest of the extracted text, the chunking and the metadata: new bytes, same text, same version
    content_sha256: str  # sha256 of the source bytes alone
    kind: SourceKind
    meta: FilingMeta
    chunking: Chunking | None = None  # None for pages (PDFs, row candidates), which do not depend on it
    documents: list[Document] = []
    chunks: list[Chunk]
    tokens: int  # sum over the chunks
    exact_tokens: bool  # counted with the model's tokenizer (else a conservative estimate)
    encoding: str | None = None  # the tokenizer the chunks' counts are from, when exact
    flags: list[FilingFlag] = []

    @property
    def empty_pages(self) -> int:
        return sum(1 for c in self.chunks if "empty" in c.flags and c.page is not None)

    @property
    def pages(self) -> int:
        return max((c.page for c in self.chunks if c.page is not None), default=0)

    def page_texts(self) -> dict[int, str]:
        """Each physical page's text as the rankers read it: its chunks, in order."""
        texts: dict[int, list[str]] = {}
        for chunk in self.chunks:
            if chunk.page is not None:
                texts.setdefault(chunk.page, []).append(chunk.text)
        return {page: PAGE_JOIN.join(parts) for page, parts in texts.items()}

    def page_offsets(self) -> dict[int, int]:
        """Where each paged chunk's text starts in its page's text, by the chunk's index."""
        offsets: dict[int, int] = {}
        ends: dict[int, int] = {}
        for chunk in self.chunks:
            if chunk.page is not None:
                offsets[chunk.index] = ends[chunk.page] + len(PAGE_JOIN) if chunk.page in ends else 0
                ends[chunk.page] = offsets[chunk.index] + len(chunk.text)
        return offsets


PAGE_JOIN = "\n\n"  # between a page's chunks in its text


# Bumped when extraction or chunking changes what a source gives, so every filing gets a new version.
INGEST_FORMAT = 2


def filing_version(content: Any, chunking: Chunking | None, record: dict[str, Any]) -> str:
    """A digest of what rankers and planning read of a filing (its text as chunked, its
    documents, its metadata), so a file rewritten with the same text keeps its version."""
    body = json.dumps(
        [INGEST_FORMAT, content, chunking.model_dump() if chunking else "pages", record],
        sort_keys=True,
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:20]


class IngestFailure(BaseModel):
    """A source that gave no filing, and why (encrypted, image-only, broken, bad metadata)."""

    source: str  # the file's name or URI
    reason: str
    at: datetime


class VersionEntry(BaseModel):
    version: str
    content_sha256: str
    key: str  # where the filing is stored
    ingested_at: datetime
    chunks: int
    tokens: int
    pages: int = 0
    empty_pages: int = 0


class FilingEntry(BaseModel):
    """A filing's versions, oldest first; ``latest`` is the one last ingested."""

    id: str
    meta: FilingMeta  # the latest version's
    latest: str
    versions: list[VersionEntry]
    updated_at: datetime | None = None  # when this head was last written (the catalogue's newest row wins)


class SourceEntry(BaseModel):
    """A source file as last ingested: its fingerprint (size and modification time or ETag, its
    metadata record, the chunking) and the filings it gave, so an unchanged file is not sent again."""

    fingerprint: str
    filings: dict[str, str]  # filing id -> version
    left_out: int = 0  # an archive's members its filter did not take


class CorpusManifest(BaseModel):
    """A corpus's catalogue as one JSON document (manifest.json), as corpora kept it before the
    catalogue tables: read only to upgrade such a corpus (workers/upgrade.py)."""

    filings: dict[str, FilingEntry] = {}
    failures: dict[str, IngestFailure] = {}
    sources: dict[str, SourceEntry] = {}
    written_at: datetime | None = None
