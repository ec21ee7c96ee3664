"""The PRISM method, pure: no Celery, no boto3, no Redis. Packages by concern, lowest first:

- ``ingest``: filings from their bytes (documents, pages, identity, chunks);
- ``corpus``: who filed what and when (companies, EDGAR ids, periods, comparable filings, scopes);
- ``llm``: the one place that talks to an LLM, and the servers' own facts, limits and prices;
- ``ranking``: rankers and strategies, prompts, the prior, retrieval, in-context examples, metrics;
- ``changes``: what changed in a passage between a company's filings;
- ``runs``: a question set, its plan and what it comes to (estimate, outcomes, evidence, status);
- ``testing``: the provider simulator and the harnesses the tests and benches drive.

The modules at this level are shared by every package and import none: options, names (every
ranker and prompt by name), models (what a job takes in and gives back), datasets (benchmark
rows), segmenting (token counts and segments) and files (a shared file written whole or not at
all). docs/architecture.md has the map.
"""
