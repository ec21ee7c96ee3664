"""Filings from PDF, HTML, text, EDGAR submissions and benchmark rows: documents, physical pages,
chunks with stable ids, identity, version.

Pure: bytes in, a Filing (or an IngestError naming the source and the reason) out. The corpus
store that keeps filings by version is workers.corpus.
"""

from prism.ingest.chunking import is_heading, page_chunks, paged_chunks, sections
from prism.ingest.extract import IngestError, pdf_pages, plain_text
from prism.ingest.filings import RowFilings, filings_from_rows, parse_filing, source_kind, stem
from prism.ingest.meta import form_type, meta_from_record, parse_meta_json, parse_meta_jsonl
from prism.ingest.models import (
    Chunk,
    Chunking,
    CorpusManifest,
    Filing,
    FilingEntry,
    FilingMeta,
    IngestFailure,
    SourceEntry,
    VersionEntry,
)

__all__ = [
    "Chunk",
    "Chunking",
    "CorpusManifest",
    "Filing",
    "FilingEntry",
    "FilingMeta",
    "IngestError",
    "IngestFailure",
    "SourceEntry",
    "RowFilings",
    "VersionEntry",
    "filings_from_rows",
    "form_type",
    "is_heading",
    "meta_from_record",
    "page_chunks",
    "parse_filing",
    "parse_meta_json",
    "parse_meta_jsonl",
    "pdf_pages",
    "plain_text",
    "paged_chunks",
    "sections",
    "source_kind",
    "stem",
]
