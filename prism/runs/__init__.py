"""A run: its question set, how each question is planned over a corpus, what it would cost, and
what its outcomes come to (cost, evidence, figures, the status it settles at).

May import: prism's shared modules, prism.ingest, prism.corpus, prism.llm, prism.ranking, prism.changes.
"""
