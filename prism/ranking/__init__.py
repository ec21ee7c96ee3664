"""Ranking: the rankers behind one interface and the strategies that drive them (segments, agents,
evidence), prompts as data, the learned filing-type prior, retrieval (lexical, dense, hybrid),
in-context examples, reply parsing and the metrics a ranking is scored by.

May import: prism's shared modules, prism.ingest, prism.llm.
"""
