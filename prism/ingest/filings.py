"""Source bytes -> a Filing: text, chunks with stable ids, token counts, metadata, version."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO, Any

from prism.datasets import RowError, iter_lines, parse_row
from prism.ingest.chunking import page_chunks, section_chunks
from prism.ingest.extract import IngestError, html_text, pdf_pages, plain_text
from prism.ingest.meta import ID_KEYS, guess_meta, meta_from_record
from prism.ingest.models import Chunk, Chunking, Filing, FilingFlag, FilingMeta, SourceKind, filing_version
from prism.segmenting import TokenCounter

KINDS: dict[str, SourceKind] = {".pdf": "pdf", ".htm": "html", ".html": "html", ".txt": "text"}
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
    """A file's name without folders and without its filing suffix: ``a/b/x.PDF`` -> ``x``."""
    base = PurePosixPath(name).name
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
) -> Filing:
    """One PDF, HTML or text file as a Filing. ``record`` is its metadata (from a ``.meta.json``
    or a folder's JSONL), ``source`` its name or URI. Raises IngestError naming the source."""
    kind = source_kind(source)
    if kind is None or kind == "rows":
        raise IngestError(source, "not a .pdf, .htm, .html or .txt file")
    chunking = chunking or Chunking()
    counter = counter or TokenCounter(chunking.encoding)
    record = record or {}
    fid, version = filing_identity(data, source, record, chunking, filing_id)
    flags: list[FilingFlag] = []
    if kind == "pdf":
        pages = pdf_pages(data, source)
        chunks = page_chunks(fid, pages, counter)
        text = "\n".join(pages)
        if any("empty" in c.flags for c in chunks):
            flags.append("empty_pages")
    else:
        if kind == "html":
            text = html_text(data, source)
        else:
            text, cp1252 = plain_text(data, source)
            if cp1252:
                flags.append("decoded_cp1252")
        chunks = section_chunks(fid, text, chunking, counter)
    meta = guess_meta(meta_from_record(record, source, f"{source} (metadata)"), stem(source), text)
    if meta.name is None:
        meta = meta.model_copy(update={"name": stem(source)})
    return _filing(fid, version, kind, data, meta, chunks, None if kind == "pdf" else chunking, counter, flags)


def filing_identity(
    data: bytes, source: str, record: dict[str, Any] | None, chunking: Chunking | None, filing_id: str | None = None
) -> tuple[str, str]:
    """The id and version a source will have, without parsing it."""
    record = record or {}
    fid = filing_id or filing_id_of(source, record)
    return fid, filing_version(sha256(data), None if source_kind(source) == "pdf" else chunking or Chunking(), record)


def filing_id_of(source: str, record: dict[str, Any] | None) -> str:
    """The id a PDF, HTML or text source gets: the one its metadata gives, else its file name's stem."""
    return _given_id(record or {}) or stem(source)


def _given_id(record: dict[str, Any]) -> str | None:
    value = next((record[k] for k in ID_KEYS if isinstance(record.get(k), str) and record[k].strip()), None)
    return value.strip() if value else None


def _filing(
    fid: str,
    version: str,
    kind: SourceKind,
    data: bytes,
    meta: FilingMeta,
    chunks: list[Chunk],
    chunking: Chunking | None,
    counter: TokenCounter,
    flags: list[FilingFlag],
) -> Filing:
    if meta.guessed:
        flags.append("guessed_metadata")
    content = sha256(data)
    return Filing(
        id=fid,
        version=version,
        content_sha256=content,
        kind=kind,
        meta=meta,
        chunking=chunking,
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
        meta = guess_meta(meta, fid, "\n".join(query.candidates[:3]))
        chunks = _candidate_chunks(fid, query.candidates, counter, pages=doc_name is not None)
        flags: list[FilingFlag] = ["empty_pages"] if doc_name and any("empty" in c.flags for c in chunks) else []
        out.filings.append(_filing(fid, version, "rows", body, meta, chunks, None, counter, flags))
    return out


def _candidate_chunks(fid: str, texts: Iterable[str], counter: TokenCounter, pages: bool) -> list[Chunk]:
    texts = list(texts)
    if pages:
        return page_chunks(fid, texts, counter)
    return [
        Chunk(id=f"{fid}:c{i + 1}", index=i, text=t, tokens=n, flags=[] if t.strip() else ["empty"])
        for i, (t, n) in enumerate(zip(texts, counter.count_many(texts)))
    ]
