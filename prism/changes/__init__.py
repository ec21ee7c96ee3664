"""What changed between a company's filings: a cited passage's paragraphs matched with the earlier
filing and classed (paragraphs), and a question's evidence redlined against it (redlines).

May import: prism's shared modules, prism.ingest.
"""
