"""The corpus's identities and periods: companies and their names, EDGAR's index files and ids,
fiscal periods, the comparable earlier filing, a corpus as planning reads it (scopes), and which
filings a backfill or a fetch takes.

May import: prism's shared modules, prism.ingest.
"""
