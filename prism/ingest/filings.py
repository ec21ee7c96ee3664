"""Source bytes -> a Filing: text, chunks with stable ids, token counts, metadata, version."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import IO, Any

from prism.datasets import RowError, iter_lines, parse_row
from prism.ingest.accession import exhibit_type
from prism.ingest.archives import member_name
from prism.ingest.chunking import page_chunks, paged_chunks
from prism.ingest.extract import IngestError, pdf_pages, plain_text
from prism.ingest.identity import identify
from prism.ingest.meta import ID_KEYS, meta_from_record
from prism.ingest.models import (
    Chunk,
    Chunking,
    Document,
    DocumentKind,
    Filing,
    FilingFlag,
    FilingMeta,
    SourceKind,
    filing_version,
)
from prism.ingest.pages import Page, html_pages, text_pages
from prism.ingest.sgml import BrokenUuencode, SgmlDocument, is_submission, parse_submission, uudecode
from prism.ingest.sniff import check_format
from prism.segmenting import TokenCounter

# .nc: a dissemination file of EDGAR's daily feed, an SGML submission like a full-submission .txt
KINDS: dict[str, SourceKind] = {".pdf": "pdf", ".htm": "html", ".html": "html", ".txt": "text", ".nc": "text"}
ROW_SUFFIXES = (".jsonl", ".jsonl.gz")
META_SUFFIXES = (".meta.json", ".meta.jsonl")
FOLDER_META = "metadata.jsonl"


def source_kind(name: str) -> SourceKind | None:
    """What a file name says it holds (suffixes in any case); None for metadata and other files."""
    lowered = PurePosixPath(name).name.lower()
    if lowered == FOLDER_META or lowered.endswith(META_SUFFIXES):
        return None
    if lowered.endswith(ROW_SUFFIXES):
        return "rows"
    return KINDS.get(PurePosixPath(lowered).suffix)


def stem(name: str) -> str:
    """A file's name without folders and without its filing suffix: ``a/b/x.PDF`` -> ``x``
    (an archive member's: ``day.tar.gz#a/x.nc`` -> ``x``)."""
    base = PurePosixPath(member_name(name)).name
    lowered = base.lower()
    for suffix in (*ROW_SUFFIXES, *KINDS):
        if lowered.endswith(suffix):
            return base[: -len(suffix)]
    return base


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_filing(
    data: bytes,
    source: str,
    record: dict[str, Any] | None = None,
    *,
    chunking: Chunking | None = None,
    counter: TokenCounter | None = None,
    filing_id: str | None = None,
    exhibits: Sequence[tuple[str, bytes, str | None]] = (),
) -> Filing:
    """One PDF, HTML, text or EDGAR submission file as a Filing. ``record`` is its metadata
    (from a ``.meta.json`` or a folder's JSONL), ``source`` its name or URI. ``exhibits`` are
    further files of the same accession (name, bytes, document type when an index gives it),
    whose pages follow the form's. Raises IngestError naming the source."""
    kind = source_kind(source)
    if kind is None or kind == "rows":
        raise IngestError(source, "not a .pdf, .htm, .html or .txt file")
    chunking = chunking or Chunking()
    counter = counter or TokenCounter(chunking.encoding)
    record = record or {}
    fid = filing_id or filing_id_of(source, record)
    given = meta_from_record(record, source, f"{source} (metadata)")
    read = _read(data, source, kind)
    meta = identify(given, stem(source), read.cover, read.header, read.facts)
    if meta.name is None:
        meta = meta.model_copy(update={"name": stem(source)})
    if not read.header and len(read.documents) == 1:  # one document: it is the form itself
        read.documents[0].type = meta.form_type or read.documents[0].type
        read.pages = [replace(p, document=read.documents[0].type) for p in read.pages]
    for name, body, doc_type in exhibits:
        _append(read, _read(body, name, source_kind(name) or "text"), doc_type or exhibit_type(name) or "EX")
    if kind == "pdf" and not exhibits:
        chunks = page_chunks(fid, [p.text for p in read.pages], counter)
        for chunk, page in zip(chunks, read.pages):
            chunk.document = page.document
    else:
        chunks = paged_chunks(fid, read.pages, chunking, counter)
    flags = list(read.flags)
    if any("empty" in c.flags for c in chunks) and kind == "pdf":
        flags.append("empty_pages")
    cut = None if kind == "pdf" and not exhibits else chunking
    return _filing(fid, kind, data, meta, chunks, cut, counter, flags, read.documents)


def _read(data: bytes, source: str, kind: SourceKind) -> Read:
    check_format(data, kind, source)
    return read_pdf(data, source) if kind == "pdf" else read_document(data, source, kind)


def _append(read: Read, exhibit: Read, doc_type: str) -> None:
    """An exhibit's pages after the filing's, under its type when it is one document."""
    first = len(read.pages)
    for document in exhibit.documents:
        if len(exhibit.documents) == 1:
            document.type = doc_type
        if document.pages:
            document.pages = (document.pages[0] + first, document.pages[1] + first)
        read.documents.append(document)
    one = exhibit.documents[0].type if len(exhibit.documents) == 1 else None
    read.pages += [replace(p, number=p.number + first, document=one or p.document) for p in exhibit.pages]


@dataclass
class Read:
    """What a source gave before it is chunked: its pages numbered across its documents."""

    pages: list[Page]
    documents: list[Document]
    cover: str  # the first page's text, where the form and the registrant are written
    header: dict[str, str] = field(default_factory=dict)  # an EDGAR submission's SEC header
    facts: dict[str, str] = field(default_factory=dict)  # inline-XBRL dei facts
    flags: list[FilingFlag] = field(default_factory=list)


def read_pdf(data: bytes, source: str) -> Read:
    texts = pdf_pages(data, source)
    pages = [Page(text, number=i + 1) for i, text in enumerate(texts)]
    return Read(pages, [Document(type="PDF", kind="pdf", pages=(1, len(pages)))], "\n".join(texts[:2]))


def read_document(data: bytes, source: str, kind: SourceKind) -> Read:
    """HTML or text, or an EDGAR full submission whatever its suffix: every readable document's
    pages in file order, numbered on across documents; data documents listed as skipped."""
    if not is_submission(data):
        read = Read([], [], "")
        read.pages = [replace(p, number=i + 1) for i, p in enumerate(_document_pages(kind, data, source, read))]
        read.documents = [Document(type=kind.upper(), kind=kind, pages=(1, len(read.pages)) if read.pages else None)]
        read.cover = _cover(read.pages)
        return read
    submission = parse_submission(data)
    if not submission.documents:
        raise IngestError(source, "an EDGAR submission with no <DOCUMENT>")
    read = Read([], [], "", header=submission.header)
    if "CONFORMED SUBMISSION TYPE" not in read.header:  # no SEC header: the first document says the form
        read.header["TYPE"] = submission.documents[0].type
    for doc in submission.documents:
        entry = Document(
            type=doc.type,
            sequence=doc.sequence,
            filename=doc.filename,
            description=doc.description,
            kind=doc.kind,
            skipped=doc.skipped,
        )
        read.documents.append(entry)
        if doc.kind == "binary":  # decoded to be known whole (a broken block fails the filing), not read
            entry.skipped = f"{doc.skipped} of {len(_decoded(doc, source)):,} bytes"
        if doc.skipped:
            continue
        where = f"{source} document {doc.sequence or len(read.documents)} ({doc.type})"
        try:
            pages = _document_pages(doc.kind, doc.body, where, read)
        except IngestError as err:
            entry.skipped = err.reason
            continue
        first = len(read.pages) + 1
        read.pages += [replace(p, number=first + i, document=doc.type) for i, p in enumerate(pages)]
        if pages:
            entry.pages = (first, len(read.pages))
    if not read.pages:
        _form_data(submission.documents[0], read, source)
    read.cover = _cover(read.pages)
    return read


_TAGGED = re.compile(r"<[^>]+>")


def _form_data(first: SgmlDocument, read: Read, source: str) -> None:
    """A submission whose form is structured data alone (Form D, 3, 4, 5: an XML primary
    document): that document's values, one a line, are its one page."""
    if first.kind != "xbrl-xml" or not first.body.strip():
        raise IngestError(source, "no readable document in the EDGAR submission")
    text, _ = plain_text(first.body, source)
    lines = [" ".join(_TAGGED.sub(" ", line).split()) for line in text.splitlines()]
    read.pages = [Page("\n".join(line for line in lines if line), number=1, document=first.type)]
    read.documents[0].pages, read.documents[0].skipped = (1, 1), None


def _decoded(doc: SgmlDocument, source: str) -> bytes:
    try:
        return uudecode(doc.body)
    except BrokenUuencode as err:
        name = f"{doc.type}{f', {doc.filename}' if doc.filename else ''}"
        raise IngestError(source, f"document {doc.sequence or '?'} ({name}): {err}") from None


def _document_pages(kind: DocumentKind | SourceKind, body: bytes, where: str, read: Read) -> list[Page]:
    """One readable document's pages; its dei facts and decoding flag go to ``read``."""
    if kind == "html":
        html = html_pages(body, where)
        for key, value in html.facts.items():
            read.facts.setdefault(key, value)
        return html.pages
    if kind == "pdf":  # uuencoded inside a submission
        try:
            data = uudecode(body)
        except BrokenUuencode as err:
            raise IngestError(where, str(err)) from None
        return [Page(text) for text in pdf_pages(data, where) if text.strip()]
    text, cp1252 = plain_text(body, where)
    if cp1252 and "decoded_cp1252" not in read.flags:
        read.flags.append("decoded_cp1252")
    return text_pages(text)


def _cover(pages: list[Page]) -> str:
    return "\n".join(p.text for p in pages[:2])


def filing_id_of(source: str, record: dict[str, Any] | None) -> str:
    """The id a PDF, HTML or text source gets: the one its metadata gives, else its file name's stem."""
    return _given_id(record or {}) or stem(source)


def _given_id(record: dict[str, Any]) -> str | None:
    value = next((record[k] for k in ID_KEYS if isinstance(record.get(k), str) and record[k].strip()), None)
    return value.strip() if value else None


def _filing(
    fid: str,
    kind: SourceKind,
    data: bytes,
    meta: FilingMeta,
    chunks: list[Chunk],
    chunking: Chunking | None,
    counter: TokenCounter,
    flags: list[FilingFlag],
    documents: list[Document],
    version: str | None = None,
) -> Filing:
    """A Filing; its version, unless given, is the digest of what it reads as (chunks, documents,
    metadata but where it was read from), so a file rewritten with the same text keeps it."""
    if meta.guessed:
        flags.append("guessed_metadata")
    if version is None:
        content = [
            [c.model_dump(exclude={"tokens"}) for c in chunks],
            [d.model_dump() for d in documents],
            meta.model_dump(mode="json", exclude={"source_uri"}),
        ]
        version = filing_version(content, chunking, {})
    return Filing(
        id=fid,
        version=version,
        content_sha256=sha256(data),
        kind=kind,
        meta=meta,
        chunking=chunking,
        documents=documents,
        chunks=chunks,
        tokens=sum(c.tokens for c in chunks),
        exact_tokens=counter.exact,
        encoding=counter.encoding.name if counter.encoding is not None else None,
        flags=flags,
    )


@dataclass
class RowFilings:
    """The filings inside chunk-ranking rows: rows whose candidate lists are identical share one."""

    filings: list[Filing] = field(default_factory=list)
    questions: dict[str, str] = field(default_factory=dict)  # query id -> filing id
    errors: list[IngestError] = field(default_factory=list)  # one per bad row, naming its line
    document_rows: int = 0  # document-ranking rows: their candidates are filing types, no filing text
    unchanged: list[str] = field(default_factory=list)  # filing ids whose version was already known: not rebuilt


def filings_from_rows(
    stream: IO[bytes],
    source: str,
    meta_index: dict[str, dict[str, Any]] | None = None,
    counter: TokenCounter | None = None,
    latest: Callable[[str], str | None] | None = None,
) -> RowFilings:
    """FinanceBench page rows (``doc_name`` set: candidates are 0-based pages, the filing id is
    the doc_name) and FinAgentBench chunk rows (the filing id is a hash of the candidate list).
    Metadata: the row's own ``company`` / ``doc_type`` fields, then ``meta_index[doc_name]``.
    A filing whose version is already ``latest(filing id)`` is listed in ``unchanged``, not rebuilt."""
    counter = counter or TokenCounter()
    meta_index = meta_index or {}
    out = RowFilings()
    by_hash: dict[str, str] = {}  # candidate-list hash -> filing id
    by_id: dict[str, tuple[str, int]] = {}  # filing id -> (candidate-list hash, first line)
    for line, raw in iter_lines(stream):
        try:
            query = parse_row(raw, line)
            row = json.loads(raw)
        except RowError as err:
            out.errors.append(IngestError(f"{source} line {line}", str(err).removeprefix(f"line {line}, ")))
            continue
        if query.task == "documents":
            out.document_rows += 1
            continue
        body = json.dumps(query.candidates, ensure_ascii=False).encode()
        digest = sha256(body)
        doc_name = row.get("doc_name") if isinstance(row.get("doc_name"), str) and row["doc_name"].strip() else None
        fid = doc_name.strip() if doc_name else by_hash.get(digest, f"rows-{digest[:16]}")
        if fid in by_id:
            if by_id[fid][0] != digest:
                reason = f"doc_name '{fid}' has other candidates than on line {by_id[fid][1]}"
                out.errors.append(IngestError(f"{source} line {line}", reason))
                continue
            out.questions[query.id] = fid
            continue
        record = {**meta_index.get(fid, {}), **{k: row[k] for k in ("company", "doc_type") if row.get(k)}}
        where = f"{source} line {line} (metadata)"
        try:
            meta = meta_from_record({**record, "name": fid}, f"{source}#line={line}", where)
        except IngestError as err:
            out.errors.append(err)
            continue
        version = filing_version(digest, None, record)
        by_hash[digest], by_id[fid] = fid, (digest, line)
        out.questions[query.id] = fid
        if latest is not None and latest(fid) == version:
            out.unchanged.append(fid)
            continue
        meta = identify(meta, fid, "\n".join(query.candidates[:3]))
        chunks = _candidate_chunks(fid, query.candidates, counter, pages=doc_name is not None)
        flags: list[FilingFlag] = ["empty_pages"] if doc_name and any("empty" in c.flags for c in chunks) else []
        out.filings.append(_filing(fid, "rows", body, meta, chunks, None, counter, flags, [], version))
    return out


def _candidate_chunks(fid: str, texts: Iterable[str], counter: TokenCounter, pages: bool) -> list[Chunk]:
    texts = list(texts)
    if pages:
        return page_chunks(fid, texts, counter)
    return [
        Chunk(id=f"{fid}:c{i + 1}", index=i, text=t, tokens=n, flags=[] if t.strip() else ["empty"])
        for i, (t, n) in enumerate(zip(texts, counter.count_many(texts)))
    ]
