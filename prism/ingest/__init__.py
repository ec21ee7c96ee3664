"""Filings from PDF, HTML, text, EDGAR submissions and benchmark rows: documents, physical pages,
chunks with stable ids, identity, version.

Pure: bytes in, a Filing (or an IngestError naming the source and the reason) out. The corpus
store that keeps filings by version is workers.corpus. Import from the modules: models (the
data), filings (parse_filing, source_kind), meta (metadata records), extract, chunking.

May import: prism's shared modules.
"""
