"""The evidence of a question-set run as an analyst opens it (evidence.csv, evidence.parquet) and
as its report prints it, with what changed since the earlier filings. prism/runs/evidence.py makes
the rows from what the run stored and what this reads of the corpus first."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable

from prism.changes.redlines import KINDS
from prism.runs.evidence import COLUMNS, SCHEMA, evidence_rows
from workers.corpus import Corpus
from workers.runstate import RunState, read_evidence


def rows_of(state: RunState, corpus: Corpus, compared: bool = True) -> tuple[list[dict], dict]:
    """The run's evidence rows and metrics (prism/runs/evidence.py)."""
    return evidence_rows(state.results, *read_evidence(state, corpus, compared), compared)


def table(rows: list[dict]) -> tuple[bytes, bytes]:
    """evidence.csv and evidence.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA])
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
    return text.getvalue().encode(), sink.getvalue()


def markdown(rows: list[dict], metrics: dict, per_question: int = 3, questions: int = 50) -> str:
    out = ["", "## Evidence", ""]
    shown = {k: v for k, v in metrics.items() if v is not None and not isinstance(v, dict)}
    out.append("- " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()))
    out.append("- every row: `evidence.csv` / `evidence.parquet`")
    by_question: dict[str, list[dict]] = {}
    for row in rows:
        if row["rank"] is not None:  # an earlier passage gone has no rank: counted below
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
    out += _redlines(rows, questions)
    return "\n".join(out) + "\n"


def change_counts(rows: Iterable[dict], key: str) -> dict[str, dict[str, int]]:
    """How many compared rows of each kind of change, by ``key`` (question_id, company)."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
    for row in rows:
        if row.get("change") in KINDS:
            found[row[key]][row["change"]] += 1
    return dict(found)


def _redlines(rows: list[dict], questions: int = 50) -> list[str]:
    """The report's counts of what changed since the earlier filings, by company and by question."""
    by_company, by_question = change_counts(rows, "company"), change_counts(rows, "question_id")
    if not by_company:
        return []
    kinds = [k for k in KINDS if any(c[k] for c in by_company.values())]
    head = ["| {} | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    out = ["", "## Changed since the previous filing", "", "Evidence rows by change (`evidence.csv`: `redline`).", ""]
    out += [head[0].format("company"), head[1]]
    out += [
        f"| {name or '-'} | " + " | ".join(str(c[k]) for k in kinds) + " |" for name, c in sorted(by_company.items())
    ]
    out += ["", head[0].format("question"), head[1]]
    for qid, c in list(by_question.items())[:questions]:
        out.append(f"| {qid} | " + " | ".join(str(c[k]) for k in kinds) + " |")
    return out
