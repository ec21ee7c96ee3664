"""What changed in a compared question's evidence since the company's earlier filing: the
``change``, ``similarity``, ``previous_filing``, ``previous_page`` and ``redline`` of each of its
rows, and a ``removed`` row for each passage the earlier filing's ranking cited that is gone from
the filing (one still in it outside the cited chunks, only no longer cited, has no row).

Made when the report is, by prism/changes/paragraphs.py: the paragraphs of a row's chunk against the whole
earlier filing's, and what the earlier ranking cited against the whole current filing, from the
filings the report read first. Each filing version's paragraphs are
made once a report, as many questions share their filings.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prism.changes.paragraphs import Change, Paragraph, compare, in_chunks, paragraphs
from prism.ingest.models import Filing
from prism.models import JobResult

COLUMNS = ("change", "similarity", "previous_filing", "previous_page", "redline")
# Kinds of ``change`` beyond prism/changes/paragraphs.py's four, in the order the report counts them.
NO_PREVIOUS = "no previous filing"
NOT_IN_CORPUS = "previous filing not in the corpus"
KINDS = ("unchanged", "modified", "added", "removed", NO_PREVIOUS, NOT_IN_CORPUS)
EXCERPT = 300  # characters of a removed passage kept as its row's excerpt


def empty() -> dict[str, Any]:
    """The columns of a row not compared (its question asks for no comparison)."""
    return {"change": "", "similarity": None, "previous_filing": "", "previous_page": None, "redline": ""}


@dataclass(frozen=True)
class Read:
    """A filing version's paragraphs, and its chunks' ids by index."""

    paragraphs: list[Paragraph]
    chunk_ids: list[str]


class Compared:
    """The comparisons of a report's questions, each filing's paragraphs made once."""

    def __init__(self, filings: Mapping[tuple[str, str], Filing | None], results: dict[str, JobResult]) -> None:
        self.filings, self.results = filings, results
        self.read: dict[tuple[str, str], Read | None] = {}

    def rows(self, pairs: list[dict], ranked: list[dict]) -> list[dict]:
        """Fill the columns of a compared question's ranked rows, in place, and return its removed
        rows (partial: the question's and the compared columns, with the company and excerpt)."""
        by_filing = {p["filing"]: p for p in pairs}
        removed: list[dict] = []
        for pair in pairs:
            rows = [r for r in ranked if r["filing_id"] == pair["filing"]]
            if pair.get("previous_of") or not rows:
                continue
            earlier = by_filing.get(pair.get("previous") or "")
            if earlier is None:
                for row in rows:
                    row["change"] = NO_PREVIOUS
                continue
            removed += self._pair(pair, earlier, rows)
        return removed

    def _pair(self, pair: dict, earlier: dict, rows: list[dict]) -> list[dict]:
        now, before = self._paragraphs(pair), self._paragraphs(earlier)
        if now is None or before is None:
            for row in rows:
                row |= {"change": NOT_IN_CORPUS, "previous_filing": earlier["filing"]}
            return []
        cited = in_chunks(now.paragraphs, {r["chunk_id"] for r in rows})
        earlier_cited = in_chunks(before.paragraphs, self._cited(earlier, before))
        found = compare(cited, before.paragraphs, earlier_cited, whole=now.paragraphs)  # gone: from the whole filing
        by_chunk: dict[str, list[Change]] = defaultdict(list)
        for change in found:
            for chunk_id in change.current.chunk_ids if change.current else ():
                by_chunk[chunk_id].append(change)
        for row in rows:
            row |= summary(by_chunk.get(row["chunk_id"], []), earlier["filing"])
            row["previous_version"] = earlier["version"]
        gone = [c for c in found if c.change == "removed"]
        base = {"question_id": rows[0]["question_id"], "question": rows[0]["question"], "company": rows[0]["company"]}
        return [base | r | {"previous_version": earlier["version"]} for r in removed_rows(gone, earlier["filing"])]

    def _paragraphs(self, pair: dict) -> Read | None:
        key = (pair["filing"], pair["version"])
        if key not in self.read:
            filing = self.filings.get(key)
            self.read[key] = Read(paragraphs(filing.chunks), [c.id for c in filing.chunks]) if filing else None
        return self.read[key]

    def _cited(self, earlier: dict, read: Read) -> list[str]:
        """The chunks the earlier filing's ranking cited for the question (none without a result)."""
        result = self.results.get(earlier["query_id"])
        if result is None:
            return []
        if not result.uncited:
            return [c.chunk_id for c in result.cited]
        return [read.chunk_ids[i] for i in result.ranking.indices if 0 <= i < len(read.chunk_ids)]


def summary(changes: list[Change], previous_filing: str) -> dict[str, Any]:
    """A chunk's columns from its paragraphs' changes: one kind where they all have it, else
    modified; the similarity averaged over the paragraphs by their length; the earlier page of
    its longest matched paragraph; the paragraphs' redlines, a blank line apart."""
    if not changes:
        return empty() | {"previous_filing": previous_filing}
    kinds = {c.change for c in changes}
    lengths = [len(c.current.text) if c.current else 1 for c in changes]
    matched = [(n, c.previous) for n, c in zip(lengths, changes, strict=True) if c.previous is not None]
    similarity = sum(n * c.similarity for n, c in zip(lengths, changes, strict=True)) / (sum(lengths) or 1)
    return {
        "change": kinds.pop() if len(kinds) == 1 else "modified",
        "similarity": round(similarity, 4),
        "previous_filing": previous_filing,
        "previous_page": max(matched, key=lambda m: m[0])[1].page if matched else None,
        "redline": "\n\n".join(c.redline for c in changes),
    }


def removed_rows(gone: Iterable[Change], previous_filing: str) -> list[dict[str, Any]]:
    """A row for each earlier chunk whose cited paragraphs no current one took."""
    by_chunk: dict[str, list[Change]] = defaultdict(list)
    for change in gone:
        if change.previous is not None:
            by_chunk[change.previous.chunk_id].append(change)
    rows = []
    for changes in by_chunk.values():
        text = "\n\n".join(c.previous.text for c in changes if c.previous is not None)
        rows.append(
            {
                "change": "removed",
                "similarity": round(max(c.similarity for c in changes), 4),
                "previous_filing": previous_filing,
                "previous_page": changes[0].previous.page if changes[0].previous else None,
                "redline": "\n\n".join(c.redline for c in changes),
                "excerpt": text[:EXCERPT],
            }
        )
    return rows
