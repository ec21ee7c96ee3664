"""The evidence of a question-set run: each question's ranked chunks with their provenance
(filing, company, form, period, page or section, chunk id, the passage that matches the question
best, the score), as a table an analyst can open (evidence.csv, evidence.parquet), and the
metrics over the questions with qrels.

Qrels are over (filing, page) or (filing, chunk id): evidence from another filing than the one
judged scores 0, so choosing the wrong filing costs what it should.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

from prism.ingest.models import Filing, FilingMeta
from prism.lexical import cite
from prism.metrics import ndcg_at
from prism.models import Cited
from prism.periods import AUTO_MARGIN, filing_date
from producer.state import RunState
from workers.corpus import Corpus
from workers.store import Store

COLUMNS = (
    "question_id",
    "question",
    "rank",
    "filing_id",
    "filing_rank",
    "company",
    "form_type",
    "period",
    "page",  # physical, 1-based, numbered on across a submission's documents
    "printed_page",  # the number printed on that page, when it prints one
    "document",  # the submission document it is in ("10-Q", "EX-99.1")
    "section",
    "heading",
    "chunk_id",
    "score",  # the row's share of its question's evidence, one scale across its filings (across_filings)
    "ranker",  # who ordered it: "llm", "llm-repaired", "fallback:lexical", "financial", ...
    "grade",
    "excerpt",
    "answer",  # with the evidence ranker: its answer from this evidence (the rows are its citations)
)


def _lines(store: Store, key: str) -> Iterator[dict]:
    try:
        data = store.get(key)
    except KeyError:
        return
    for line in data.splitlines():
        if line.strip():
            yield json.loads(line)


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


def evidence_rows(state: RunState, corpus: Corpus) -> tuple[list[dict], dict]:
    """Every question's evidence, best first across its filings, and the
    metrics: filing_top1, evidence recall@5 and NDCG@5 over the questions with qrels whose
    judged filing is in the corpus."""
    store, layout = state.store, state.layout
    questions = {q["question_id"]: q for q in _lines(store, layout.file("questions.jsonl"))}
    pairs: dict[str, list[dict]] = {}
    for row in _lines(store, layout.file("plan.jsonl")):
        if row.get("filing"):
            pairs.setdefault(row["question_id"], []).append(row)
    results = {r.query_id: r for r in state.results.values() if r.task == "chunks"}
    manifest = corpus.manifest()
    in_corpus = set(manifest.filings)
    pages = {
        fid: next((v.pages for v in e.versions if v.version == e.latest), 0) for fid, e in manifest.filings.items()
    }
    filings: dict[tuple[str, str], Filing] = {}  # read only for results that carry no citations
    rows: list[dict] = []
    judged = top1 = 0
    recall = ndcg = 0.0
    by_question: dict[str, float] = {}
    no_filing = sum(1 for q in questions.values() if not q["filings"])
    for qid, q in questions.items():
        # a page qrel over a filing without that page is not judged (the run said so when it began)
        judgeable = [r for r in q["qrels"] if r.get("page") is None or 0 < r["page"] <= pages.get(r["filing"], 0)]
        grades = {(r["filing"], r.get("page", r.get("chunk"))): r["grade"] for r in judgeable}
        chunks: list[Found] = []
        for pair in sorted(pairs.get(qid, []), key=lambda p: p["filing_rank"]):
            result = results.get(pair["query_id"])
            if result is None:
                continue
            cited = result.cited
            if len(cited) != len(result.ranking.indices):  # ranked before results carried them
                key = (pair["filing"], pair["version"])
                if key not in filings:
                    filings[key] = corpus.get_filing(*key)
                cited = [cite(q["question"], filings[key].chunks[i]) for i in result.ranking.indices]
            scores = result.ranking.scores or []
            answer = (result.ranking.details or {}).get("answer") or ""
            ranker = result.ranking.ranker or ""
            for position, chunk in enumerate(cited):
                score = float(scores[position]) if position < len(scores) else None
                chunks.append(Found(pair["filing"], pair, position, chunk, score, answer, ranker))
        ranked: list[tuple[str, int | str | None]] = []
        for score, (fid, pair, _, chunk, _, answer, ranker) in across_filings(chunks):
            meta = manifest.filings[fid].meta
            grade = grades.get((fid, chunk.page), grades.get((fid, chunk.chunk_id)))
            ranked.append((fid, chunk.page if chunk.page is not None else chunk.chunk_id))
            rows.append(
                {
                    "question_id": qid,
                    "question": q["question"],
                    "rank": len(ranked),
                    "filing_id": fid,
                    "filing_rank": pair["filing_rank"],
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
                    "ranker": ranker,
                    "grade": grade,
                    "excerpt": chunk.excerpt,
                    "answer": answer,
                }
            )
        relevant = {k for k, g in grades.items() if g > 0}
        if not relevant or not {f for f, _ in relevant} & in_corpus:
            continue
        judged += 1
        # the filing of the best evidence: one ranking across the question's filings decides it
        chosen = ranked[0][0] if ranked else q["filings"][0]["filing"] if q["filings"] else None
        top1 += int(chosen in {f for f, _ in relevant})
        ranked = list(dict.fromkeys(ranked))  # a page holds several chunks: it is cited once, where first ranked
        found = {k for k in ranked[:5] if k in relevant}
        recall += len(found) / len(relevant)
        ids = {k: i for i, k in enumerate(dict.fromkeys([*grades, *ranked]))}
        by_question[qid] = ndcg_at([ids[k] for k in ranked], {ids[k]: g for k, g in grades.items()}, 5)
        ndcg += by_question[qid]
    metrics = {
        "questions": len(questions),
        "judged": judged,
        "no_filing_in_scope": no_filing,
        "filing_top1": top1 / judged if judged else None,
        "evidence_recall@5": recall / judged if judged else None,
        "evidence_ndcg@5": ndcg / judged if judged else None,
        "evidence_ndcg@5_by_question": by_question,
    }
    return rows, metrics


def write(state: RunState, corpus: Corpus) -> tuple[list[dict], dict]:
    """evidence.csv, evidence.parquet and evidence_metrics.json in the run's folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, metrics = evidence_rows(state, corpus)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    layout = state.layout
    state.store.put(layout.file("evidence.csv"), text.getvalue().encode())
    schema = pa.schema(
        [
            ("question_id", pa.string()),
            ("question", pa.string()),
            ("rank", pa.int32()),
            ("filing_id", pa.string()),
            ("filing_rank", pa.int32()),
            ("company", pa.string()),
            ("form_type", pa.string()),
            ("period", pa.string()),
            ("page", pa.int32()),
            ("printed_page", pa.string()),
            ("document", pa.string()),
            ("section", pa.int32()),
            ("heading", pa.string()),
            ("chunk_id", pa.string()),
            ("score", pa.float64()),
            ("ranker", pa.string()),
            ("grade", pa.int32()),
            ("excerpt", pa.string()),
            ("answer", pa.string()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    state.store.put(layout.file("evidence.parquet"), sink.getvalue())
    state.store.put(layout.file("evidence_metrics.json"), json.dumps(metrics, indent=1).encode())
    return rows, metrics


def markdown(rows: list[dict], metrics: dict, per_question: int = 3, questions: int = 50) -> str:
    out = ["", "## Evidence", ""]
    shown = {k: v for k, v in metrics.items() if v is not None and not isinstance(v, dict)}
    out.append("- " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()))
    out.append("- every row: `evidence.csv` / `evidence.parquet`")
    by_question: dict[str, list[dict]] = {}
    for row in rows:
        by_question.setdefault(row["question_id"], []).append(row)
    for qid, items in list(by_question.items())[:questions]:
        out += ["", f"**{qid}**: {items[0]['question'][:200]}", ""]
        if items[0]["answer"]:
            cited = ", ".join(f"`{r['chunk_id']}`" for r in items if r["answer"] == items[0]["answer"])
            out += [f"answer: {items[0]['answer'][:400]} (from {cited})", ""]
        for r in items[:per_question]:
            where = f"page {r['page']}" if r["page"] is not None else f"section {r['section']}"
            score = f", score {r['score']:.3f}" if r["score"] is not None else ""
            out.append(
                f"{r['rank']}. {r['filing_id']} ({r['company']}, {r['form_type']}, {r['period']}) {where} "
                f"`{r['chunk_id']}`{score}: {r['excerpt'][:160]}"
            )
    return "\n".join(out) + "\n"
