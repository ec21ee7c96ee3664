"""What the tests and benches drive the method with: the provider simulator (an OpenAI-compatible
server over HTTP, hosted or self-hosted in shape), synthetic EDGAR feeds, and the adaptive
limit's simulation harness. Never imported by the method itself.

May import: prism's shared modules, prism.ingest, prism.corpus, prism.llm, prism.ranking, prism.changes, prism.runs.
"""
