"""The evidence of a question-set run: each question's ranked chunks with their provenance
(filing, company, form, period, page or section, chunk id, the passage that matches the question
best, the score), the rows of the table an analyst opens (producer/evidence.py writes it), and
the metrics over the questions with qrels. Made from what the run stored and what its report
read of the corpus first (``CorpusPart``): nothing here reads.

Qrels are over (filing, page) or (filing, chunk id): evidence from another filing than the one
judged scores 0, so choosing the wrong filing costs what it should.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from prism.changes import redlines
from prism.corpus.periods import AUTO_MARGIN, filing_date
from prism.ingest.models import Filing, FilingEntry, FilingMeta
from prism.models import Cited, JobResult
from prism.ranking.lexical import cite
from prism.ranking.metrics import ndcg_at

# The table's columns, in order, with their Parquet types.
SCHEMA = (
    ("question_id", "string"),
    ("question", "string"),
    ("rank", "int32"),
    ("filing_id", "string"),
    ("filing_rank", "int32"),
    ("company", "string"),
    ("form_type", "string"),
    ("period", "string"),
    ("page", "int32"),  # physical, 1-based, numbered on across a submission's documents
    ("printed_page", "string"),  # the number printed on that page, when it prints one
    ("document", "string"),  # the submission document it is in ("10-Q", "EX-99.1")
    ("section", "int32"),
    ("heading", "string"),
    ("chunk_id", "string"),
    ("score", "float64"),  # the row's share of its question's evidence, one scale across its filings
    ("ranker", "string"),  # who ordered it: "llm", "llm-repaired", "fallback:lexical", "financial", ...
    ("grade", "int32"),
    ("excerpt", "string"),
    ("answer", "string"),  # with the evidence ranker: its answer from this evidence (the rows are its citations)
    # With a comparison (--compare), what changed since the company's earlier filing (prism/changes/redlines.py):
    # unchanged, modified, added, removed (a passage the earlier evidence cited, gone from the filing),
    # no previous filing.
    ("change", "string"),
    ("similarity", "float64"),  # TF-IDF cosine with the earlier passage
    ("previous_filing", "string"),
    ("previous_page", "int32"),  # where the earlier passage is
    ("redline", "string"),  # the passage with [-removed-]{+added+} words
)
COLUMNS = tuple(name for name, _ in SCHEMA)


def _period(meta: FilingMeta) -> str:
    if meta.fiscal_year and meta.fiscal_quarter:
        return f"{meta.fiscal_year}Q{meta.fiscal_quarter}"
    if meta.fiscal_year:
        return f"FY{meta.fiscal_year}"
    dated = filing_date(meta)
    return dated.isoformat() if dated else ""


def _shares(values: list[float], temperature: float) -> list[float]:
    """A softmax: shares of 1, the larger values the larger shares."""
    top = max(values, default=0.0)
    weights = [math.exp((v - top) / temperature) for v in values]
    return [w / sum(weights) for w in weights]


class Found(NamedTuple):
    """One ranked chunk of a question's pair, before the question's filings are merged."""

    filing: str
    pair: dict[str, Any]  # the pair's plan row: filing_rank, filing_score, version, query_id
    position: int  # its rank within its filing
    chunk: Cited
    score: float | None  # the ranker's own, where it gives one
    answer: str
    ranker: str


def across_filings(found: list[Found]) -> list[tuple[float, Found]]:
    """A question's chunks from all of its filings as one ranking, by one score on one scale:
    the filing's share (a softmax of the filings' choice scores, at the temperature of
    --filings auto's margin: a filing that close weighs 1/e of the best) times the chunk's share
    within its filing (a softmax of the ranker's scores where it gives them, else of the ranks'
    reciprocals). A question's scores add up to 1; best first."""
    by_filing: dict[str, list[Found]] = {}
    for entry in found:
        by_filing.setdefault(entry.filing, []).append(entry)
    filings = sorted(by_filing.values(), key=lambda entries: entries[0].pair["filing_rank"])
    weights = _shares([float(entries[0].pair.get("filing_score") or 0.0) for entries in filings], AUTO_MARGIN)
    scored: list[tuple[float, Found]] = []
    for weight, entries in zip(weights, filings, strict=True):
        scores = [e.score for e in entries]
        if all(score is not None for score in scores):
            shares = _shares([float(score or 0.0) for score in scores], 1.0)
        else:
            reciprocal = [1 / (e.position + 1) for e in entries]
            shares = [r / sum(reciprocal) for r in reciprocal]
        scored += [(weight * share, e) for share, e in zip(shares, entries, strict=True)]
    return sorted(scored, key=lambda s: (-s[0], s[1].pair["filing_rank"], s[1].position))


@dataclass(frozen=True)
class CorpusPart:
    """What a report reads of its corpus before it makes the evidence: the heads of the filings
    its plan and qrels name (None: not in the corpus), and the filing versions it wants whole (a
    result's from before results carried their citations; a compared question's filings and
    their earlier ones; None: not in the corpus)."""

    heads: dict[str, FilingEntry | None]
    whole: dict[tuple[str, str], Filing | None]

    def pages(self, fid: str) -> int:
        head = self.heads.get(fid)
        return next((v.pages for v in head.versions if v.version == head.latest), 0) if head else 0


def evidence_rows(
    results: dict[str, JobResult],
    questions: list[dict],
    plan: list[dict],
    corpus: CorpusPart,
    compared: bool = True,
) -> tuple[list[dict], dict]:
    """Every question's evidence, best first across its filings, and the metrics: filing_top1,
    evidence recall@5 and NDCG@5 over the questions with qrels whose judged filing is in the
    corpus. A question compared with earlier filings has what changed in its rows, and after
    them a row for each earlier passage gone (not judged); ``compared=False`` leaves that out."""
    by_query = {r.query_id: r for r in results.values() if r.task == "chunks"}
    questions = list({q["question_id"]: q for q in questions}.values())
    pairs: dict[str, list[dict]] = {}
    for row in plan:
        if row.get("filing"):
            pairs.setdefault(row["question_id"], []).append(row)
    changes = redlines.Compared(corpus.whole, by_query)
    rows: list[dict] = []
    judged = _Judged(lambda fid: corpus.heads.get(fid) is not None)
    for q in questions:
        chosen = [p for p in pairs.get(q["question_id"], []) if not p.get("previous_of")]  # not its earlier filings
        found = across_filings(_found(q, chosen, by_query, corpus))
        ranked = [_row(q, rank, score, entry, corpus) for rank, (score, entry) in enumerate(found, start=1)]
        judged.add(q, ranked, corpus.pages)
        rows += ranked
        if compared and q.get("compare"):
            rows += [_blank() | row for row in changes.rows(pairs.get(q["question_id"], []), ranked)]
    return rows, judged.metrics(questions)


def _blank() -> dict:
    """A row with every column empty."""
    extras = {"cik": "", "accession": "", "version": "", "start": None, "end": None}
    return {name: "" if kind == "string" else None for name, kind in SCHEMA} | extras


def _found(q: dict, pairs: list[dict], results: dict[str, JobResult], corpus: CorpusPart) -> list[Found]:
    """The question's ranked chunks, filing by filing in the order they were chosen."""
    chunks: list[Found] = []
    for pair in sorted(pairs, key=lambda p: p["filing_rank"]):
        result = results.get(pair["query_id"])
        if result is None:
            continue
        cited = result.cited
        filing = corpus.whole.get((pair["filing"], pair["version"])) if result.uncited else None
        if filing is not None:
            offsets = filing.page_offsets()
            cited = [cite(q["question"], filing.chunks[i], offsets.get(i, 0)) for i in result.ranking.indices]
        scores = result.ranking.scores or []
        answer = (result.ranking.details or {}).get("answer") or ""
        for position, chunk in enumerate(cited):
            score = float(scores[position]) if position < len(scores) else None
            chunks.append(Found(pair["filing"], pair, position, chunk, score, answer, result.ranking.ranker or ""))
    return chunks


def _row(q: dict, rank: int, score: float, entry: Found, corpus: CorpusPart) -> dict:
    head, chunk = corpus.heads.get(entry.filing), entry.chunk
    meta = head.meta if head is not None else FilingMeta(source_uri="")
    return {
        "question_id": q["question_id"],
        "question": q["question"],
        "rank": rank,
        "filing_id": entry.filing,
        "filing_rank": entry.pair["filing_rank"],
        "company": meta.company or "",
        "form_type": meta.form_type or "",
        "period": _period(meta),
        "page": chunk.page,
        "printed_page": chunk.printed_page or "",
        "document": chunk.document or "",
        "section": chunk.section,
        "heading": chunk.heading or "",
        "chunk_id": chunk.chunk_id,
        "score": round(score, 4),
        "ranker": entry.ranker,
        "grade": None,
        "excerpt": chunk.excerpt,
        "answer": entry.answer,
        **redlines.empty(),
        # beyond the table's columns, for the viewer: the filing's identity and where the excerpt is
        "cik": meta.cik or "",
        "accession": meta.accession or "",
        "version": entry.pair.get("version", ""),
        "start": chunk.start,
        "end": chunk.end,
    }


class _Judged:
    """The metrics over the questions whose qrels name a filing of the corpus."""

    def __init__(self, in_corpus: Callable[[str], bool]):
        self.in_corpus, self.judged, self.top1 = in_corpus, 0, 0
        self.recall, self.ndcg = 0.0, 0.0
        self.by_question: dict[str, float] = {}

    def add(self, q: dict, rows: list[dict], pages: Callable[[str], int]) -> None:
        """Grade the question's rows (in place) and count it, where it is judged. A page qrel over
        a filing without that page is not judged (the run said so when it began)."""
        judgeable = [r for r in q["qrels"] if r.get("page") is None or 0 < r["page"] <= pages(r["filing"])]
        grades = {(r["filing"], r.get("page", r.get("chunk"))): r["grade"] for r in judgeable}
        ranked: list[tuple[str, int | str | None]] = []
        for row in rows:
            row["grade"] = grades.get((row["filing_id"], row["page"]), grades.get((row["filing_id"], row["chunk_id"])))
            ranked.append((row["filing_id"], row["page"] if row["page"] is not None else row["chunk_id"]))
        relevant = {k for k, g in grades.items() if g > 0}
        if not relevant or not any(self.in_corpus(f) for f in {f for f, _ in relevant}):
            return
        self.judged += 1
        # the filing of the best evidence: one ranking across the question's filings decides it
        chosen = ranked[0][0] if ranked else q["filings"][0]["filing"] if q["filings"] else None
        self.top1 += int(chosen in {f for f, _ in relevant})
        ranked = list(dict.fromkeys(ranked))  # a page holds several chunks: it is cited once, where first ranked
        self.recall += len({k for k in ranked[:5] if k in relevant}) / len(relevant)
        ids = {k: i for i, k in enumerate(dict.fromkeys([*grades, *ranked]))}
        self.by_question[q["question_id"]] = ndcg_at(
            [ids[k] for k in ranked], {ids[k]: g for k, g in grades.items()}, 5
        )
        self.ndcg += self.by_question[q["question_id"]]

    def metrics(self, questions: list[dict]) -> dict:
        judged = self.judged
        return {
            "questions": len(questions),
            "judged": judged,
            "no_filing_in_scope": sum(1 for q in questions if not q["filings"]),
            "filing_top1": self.top1 / judged if judged else None,
            "evidence_recall@5": self.recall / judged if judged else None,
            "evidence_ndcg@5": self.ndcg / judged if judged else None,
            "evidence_ndcg@5_by_question": self.by_question,
        }
