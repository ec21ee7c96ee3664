"""What the viewer shows of a run, read from its store and its corpus: the run (status, counts,
cost beside its estimate, failures by reason, warnings, plots), the list of its questions, and
each question's page (its scope, the filings considered, its evidence rows with their cited
pages' text and the passage's offsets, its calls, what changed against another run)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from prism.ingest.models import Filing
from prism.models import EXIT_CODES, STATUS_MEANING, RunManifest
from prism.runs.outcomes import cost_report
from prism.runs.planning import NO_FILING
from producer.evidence import rows_of
from workers.corpus import Corpus
from workers.runfiles import RunFiles
from workers.runstate import RunState

PLOTS = ("latency.png", "tokens_cost.png", "ndcg.png")
TOP = 5  # the rows compared against another run
CHANGED = ("modified", "added", "removed")  # a row's changes since the earlier filing that count as changed


@dataclass
class Pages:
    """The cited pages' texts, each once, numbered as the export names its files."""

    corpus: Corpus
    ids: dict[tuple[str, str, str], int] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    filings: dict[tuple[str, str], Filing] = field(default_factory=dict)

    def previous_page_id(self, row: dict) -> int | None:
        """The number of the earlier filing's page a compared row names, if it names one."""
        if not row.get("previous_filing") or row.get("previous_page") is None:
            return None
        earlier = {"filing_id": row["previous_filing"], "version": row.get("previous_version", "")}
        return self.page_id(earlier | {"page": row["previous_page"], "chunk_id": ""})

    def page_id(self, row: dict) -> int:
        """The number of a row's page text (its chunk's own text, for a chunk without a page)."""
        where = str(row["page"]) if row["page"] is not None else f"chunk:{row['chunk_id']}"
        key = (row["filing_id"], row["version"], where)
        if key not in self.ids:
            self.ids[key] = len(self.texts)
            self.texts.append(self._text(row))
        return self.ids[key]

    def _text(self, row: dict) -> str:
        key = (row["filing_id"], row["version"])
        if key not in self.filings:
            self.filings[key] = self.corpus.get_filing(*key) if key[1] else self.corpus.get_filing(key[0])
        filing = self.filings[key]
        if row["page"] is not None:
            return filing.page_texts().get(row["page"], "")
        return next((c.text for c in filing.chunks if c.id == row["chunk_id"]), "")


@dataclass
class View:
    """A run as the viewer shows it: the run page's data, and each question's."""

    run: dict
    questions: list[dict]
    pages: list[str]


def build(files: RunFiles, corpus: Corpus | None, edgar_url: str, against: RunFiles | None = None) -> View:
    manifest = files.manifest()
    state = RunState(files.store, manifest.run_id).poll()
    rows, metrics = rows_of(state, corpus) if corpus is not None else ([], {})
    plans = list(files.questions())
    by_question: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_question[row["question_id"]].append(row)
    pages = Pages(corpus) if corpus is not None else None
    other = _top_pages(against, corpus) if against is not None else None
    calls = _calls(state, files)
    failed = _failed(state)
    questions = []
    for n, plan in enumerate(plans):
        mine = by_question.get(plan["question_id"], [])
        changes = _changes(plan["question_id"], mine, other, against) if other is not None else None
        questions.append(_question(n, plan, mine, pages, edgar_url, calls, changes, manifest.run_id))
    _link(questions)
    entries = [_entry(q, plan, metrics, failed) for q, plan in zip(questions, plans, strict=True)]
    run = _run(files, manifest, state, metrics, entries, against, questions)
    run["compared"] = _compared(entries)
    return View(run, questions, pages.texts if pages else [])


def _compared(entries: list[dict]) -> list[dict]:
    """Per company, its questions compared with earlier filings and those whose evidence changed."""
    by_company: dict[str, dict] = {}
    for e in entries:
        if e["compared"]:
            found = by_company.setdefault(e["company"], {"company": e["company"], "questions": 0, "changed": 0})
            found["questions"] += 1
            found["changed"] += bool(e["changed_previous"])
    return sorted(by_company.values(), key=lambda c: c["company"])


def _run(
    files: RunFiles,
    manifest: RunManifest,
    state: RunState,
    metrics: dict,
    entries: list[dict],
    against: RunFiles | None,
    questions: list[dict],
) -> dict:
    config = manifest.config
    cost = _json(files, "cost.json") or cost_report(state)
    shown = {k: v for k, v in metrics.items() if v is not None and not isinstance(v, dict)}
    changed = sum(1 for q in questions if q.get("changes") and q["changes"]["changed"])
    return {
        "run": {
            "run_id": manifest.run_id,
            "status": manifest.status,
            "meaning": STATUS_MEANING.get(manifest.status, ""),
            "exit_code": EXIT_CODES.get(manifest.status, 0),
            "error": manifest.error,
            "counts": manifest.counts,
            "corpus": manifest.corpus,
            "input": manifest.input,
            "rankers": f"documents {config.doc_ranker} ({config.doc_prompt}), chunks {config.chunk_ranker} "
            f"({config.chunk_prompt}); models {', '.join(sorted(set(config.models.values())))}",
            "wall_s": manifest.timings.get("wall_s"),
            "outage_s": manifest.timings.get("provider_unavailable_s"),
            "prompt_checks": [{"text": c.text(), "dropped": c.dropped is not False} for c in manifest.prompt_checks],
        },
        "cost": _costs(cost, _json(files, "estimate.json")),
        "estimate_note": _estimate_note(_json(files, "estimate.json")),
        "metrics": ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()),
        "failures": _failure_groups(state),
        "warnings": [
            f"{w.get('source', '')} line {w.get('line')}, field '{w.get('field')}': {w.get('message')}"
            for w in files.warnings()
        ],
        "plots": [name for name in PLOTS if files.store.exists(files.layout.file(name))],
        "against": {"run_id": against.layout.run_id, "changed": changed, "compared": len(questions)}
        if against
        else None,
        "questions": entries,
    }


def _costs(cost: dict, estimate: dict | None) -> dict:
    """The total, then a row per stage (beside the estimate's calls and prompt tokens) and per tier."""
    stages = (estimate or {}).get("stages") or {}
    rows = []
    for kind in ("by_stage", "by_tier"):
        for name, s in cost.get(kind, {}).items():
            row = {
                "group": f"{kind.removeprefix('by_')} {name}",
                "calls": s["calls"],
                "prompt_tokens": s["prompt_tokens"],
                "cached_tokens": s["cached_tokens"],
                "completion_tokens": s["completion_tokens"],
                "usd": _usd(s),
            }
            if kind == "by_stage" and name in stages:
                row |= {
                    "estimate_calls": stages[name]["calls"],
                    "estimate_prompt_tokens": stages[name]["prompt_tokens"],
                }
            rows.append(row)
    total = cost["total"]
    return {"total": {"calls": total["calls"], "usd": _usd(total)}, "by_stage": rows}


def _estimate_note(estimate: dict | None) -> str:
    if not estimate:
        return ""
    if "error" in estimate:
        return f"No estimate: {estimate['error']}."
    usd = estimate.get("usd", {})
    return (
        f"`prism estimate` of the run's plans: USD {float(usd.get('standard', 0)):.4f} standard, "
        f"{float(usd.get('standard_cached', 0)):.4f} with the provider cache, {float(usd.get('batch', 0)):.4f} batch"
    )


def _usd(summary: dict) -> float | None:
    return float(Decimal(str(summary["usd"]))) if summary.get("usd_known", True) else None


def _json(files: RunFiles, name: str) -> dict | None:
    try:
        return files.json(name)
    except KeyError:
        return None


def _failure_groups(state: RunState) -> list[dict]:
    """Failures grouped by their reason (the error up to its first colon), each with where it was."""
    groups: dict[str, list[str]] = defaultdict(list)
    for f in [*state.input_failures, *state.job_failures]:
        reason = f.error.split(": ", 1)[0] if f.kind == "job" else f"bad input line, field '{f.field}'"
        where = " ".join(p for p in (f.source or "", f"line {f.line}" if f.line else "") if p)
        groups[reason].append(f"{f.query_id or '-'} ({where or 'no file'}): {f.error}")
    return [{"reason": reason, "items": items} for reason, items in sorted(groups.items(), key=lambda g: -len(g[1]))]


def _failed(state: RunState) -> set[str]:
    """The questions with a failed job other than having no filing in scope."""
    return {f.query_id.split("@")[0] for f in state.job_failures if f.query_id and not f.error.startswith(NO_FILING)}


def _calls(state: RunState, files: RunFiles) -> dict[str, dict]:
    """Each question's calls, tokens and USD, over its document job and its pairs."""
    question_of = {row["query_id"]: row.get("question_id", row["query_id"]) for row in files.plan()}
    out: dict[str, dict] = defaultdict(lambda: {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "usd": 0.0})
    for query_id, _, call in state.calls():
        totals = out[question_of.get(query_id, query_id)]
        totals["calls"] += 1
        totals["prompt_tokens"] += call.usage.prompt_tokens
        totals["completion_tokens"] += call.usage.completion_tokens
        totals["usd"] = None if totals["usd"] is None or call.usd is None else totals["usd"] + float(call.usd)
    return out


def _question(
    n: int,
    plan: dict,
    rows: list[dict],
    pages: Pages | None,
    edgar_url: str,
    calls: dict[str, dict],
    changes: dict | None,
    run_id: str,
) -> dict:
    filings = {r["filing_id"]: r for r in rows}
    return {
        "n": n,
        "id": plan["question_id"],
        "run_id": run_id,
        "question": plan["question"],
        "scope": plan.get("scope") or {},
        "period": plan.get("period", ""),
        "forms_ranked_by": plan.get("forms_ranked_by", ""),
        "error": plan.get("error"),
        "answer": plan.get("answer"),
        "compare": plan.get("compare"),
        "considered": [_considered(c, filings.get(c["filing"])) for c in plan.get("considered", [])],
        "rows": [_evidence(r, pages, edgar_url) for r in rows],
        "calls": calls.get(plan["question_id"], {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "usd": 0.0}),
        "changes": changes,
    }


def _considered(c: dict, row: dict | None) -> dict:
    return c | {
        "company": row["company"] if row else "",
        "form": row["form_type"] if row else "",
        "period": row["period"] if row else "",
    }


def _evidence(row: dict, pages: Pages | None, edgar_url: str) -> dict:
    cik, accession = row.get("cik") or "", row.get("accession") or ""
    edgar = ""
    if cik and accession:
        edgar = (
            f"{edgar_url.rstrip('/')}/Archives/edgar/data/{int(cik)}/{accession.replace('-', '')}/{accession}-index.htm"
        )
    return {
        "rank": row["rank"],
        "score": row["score"],
        "filing": row["filing_id"],
        "company": row["company"],
        "form": row["form_type"],
        "period": row["period"],
        "cik": cik,
        "accession": accession,
        "edgar": edgar,
        "page": row["page"],
        "printed_page": row["printed_page"],
        "document": row["document"],
        "heading": row["heading"],
        "chunk_id": row["chunk_id"],
        "ranker": row["ranker"],
        "grade": row["grade"],
        "excerpt": row["excerpt"],
        "page_id": pages.page_id(row) if pages is not None and row["filing_id"] else None,
        "start": row.get("start"),
        "end": row.get("end"),
        "change": row.get("change", ""),
        "similarity": row.get("similarity"),
        "previous_filing": row.get("previous_filing", ""),
        "previous_page": row.get("previous_page"),
        "previous_page_id": pages.previous_page_id(row) if pages is not None else None,
        "redline": row.get("redline", ""),
    }


def _link(questions: list[dict]) -> None:
    """Each question's previous and next, for n and p."""
    for before, after in zip(questions, questions[1:], strict=False):
        before["next"] = {"n": after["n"], "id": after["id"]}
        after["prev"] = {"n": before["n"], "id": before["id"]}


def _entry(q: dict, plan: dict, metrics: dict, failed: set[str]) -> dict:
    """A question's line in the run's list, with what its filters read."""
    top = q["rows"][0] if q["rows"] else None
    judged = metrics.get("evidence_ndcg@5_by_question", {})
    return {
        "n": q["n"],
        "id": q["id"],
        "question": q["question"],
        "company": (top["company"] if top else "") or (q["scope"].get("company") or ""),
        "form": top["form"] if top else "",
        "top": f"{top['filing']} p.{top['page']}" if top and top["page"] is not None else "",
        "failed": q["id"] in failed,
        "no_filing": bool(plan.get("error") and plan["error"].startswith(NO_FILING)),
        "miss": q["id"] in judged and judged[q["id"]] == 0.0,
        "changed": bool(q.get("changes") and q["changes"]["changed"]),
        "compared": bool(q.get("compare")),
        "changed_previous": sum(1 for r in q["rows"] if r["change"] in CHANGED),
    }


def _top_pages(files: RunFiles, corpus: Corpus | None) -> dict[str, list[tuple[str, Any, float]]]:
    """Another run's top rows per question: (filing, page or chunk, score)."""
    if corpus is None:
        return {}
    state = RunState(files.store, files.layout.run_id).poll()
    rows, _ = rows_of(state, corpus, compared=False)
    out: dict[str, list[tuple[str, Any, float]]] = defaultdict(list)
    for row in rows:
        if len(out[row["question_id"]]) < TOP:
            where = row["page"] if row["page"] is not None else row["chunk_id"]
            out[row["question_id"]].append((row["filing_id"], where, row["score"]))
    return out


def _changes(
    qid: str, rows: list[dict], other: dict[str, list[tuple[str, Any, float]]], against: RunFiles | None
) -> dict:
    """What changed in the question's top five against the other run: pages new and dropped,
    pages that moved, and score changes of a hundredth or more."""
    assert against is not None
    mine = [(r["filing_id"], r["page"] if r["page"] is not None else r["chunk_id"], r["score"]) for r in rows[:TOP]]
    before = other.get(qid, [])
    rank_now = {(f, w): i for i, (f, w, _) in enumerate(mine)}
    rank_then = {(f, w): i for i, (f, w, _) in enumerate(before)}
    score_then = {(f, w): s for f, w, s in before}
    name = lambda key: f"{key[0]} p.{key[1]}"  # noqa: E731
    new = [name(k) for k in rank_now if k not in rank_then]
    dropped = [name(k) for k in rank_then if k not in rank_now]
    moved = [
        f"{name(k)} #{rank_then[k] + 1} -> #{i + 1}"
        for k, i in rank_now.items()
        if k in rank_then and rank_then[k] != i
    ]
    scores = [
        f"{name((f, w))} {score_then[(f, w)]:.3f} -> {s:.3f}"
        for f, w, s in mine
        if (f, w) in score_then and abs(score_then[(f, w)] - s) >= 0.01
    ]
    changed = bool(new or dropped or moved or scores)
    return {
        "against": against.layout.run_id,
        "new_pages": new,
        "dropped_pages": dropped,
        "moved": moved,
        "score_changes": scores,
        "changed": changed,
    }
