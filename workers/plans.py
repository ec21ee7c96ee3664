"""A question set's plans as the fleet recorded them: gathered into the run's plan.jsonl and
questions.jsonl, and counted. Read by whoever finalizes a run: no broker needed."""

from __future__ import annotations

from prism.models import QuestionPlan
from workers import keys
from workers.ledger import Progress
from workers.runfiles import RunFiles
from workers.runstate import RunState
from workers.store import Store, get_model


def gather(store: Store, run_id: str, progress: Progress | None) -> tuple[list[QuestionPlan], list[dict]]:
    """Each enqueued question's plan (planned ones) and the run's plan rows: a planned question's
    document job and pairs, or the question itself while it is not planned (pending); written to
    plan.jsonl and questions.jsonl."""
    files, plans, rows = RunFiles(store, run_id), [], []
    kept = _kept_plans(files, progress)
    for row in files.enqueued():
        plan = kept.get(row["question_id"])
        if plan is None:
            rows.append(row)  # enqueued, not planned yet (or lost)
            continue
        plans.append(plan)
        rows += _plan_rows(plan)
    files.put_plan(rows)
    files.put_questions(_question_line(p) for p in plans)
    return plans, rows


def _plan_rows(plan: QuestionPlan) -> list[dict]:
    """A planned question's rows of plan.jsonl: its document job's, then each pair's (or its own,
    failed in planning)."""
    base = {"question_id": plan.question_id, "line": plan.line, "source": plan.source}
    rows = []
    if plan.documents is not None:
        rows.append(base | {"query_id": plan.question_id, "task": "documents", "state": plan.documents})
    if not plan.pairs:
        rows.append(base | {"query_id": plan.question_id, "task": "chunks", "state": "failed"})
    for p in plan.pairs:
        pair = {"filing": p.filing, "version": p.version, "filing_rank": p.filing_rank, "filing_score": p.filing_score}
        reuse = {"since": p.since, "reused": p.reused} if p.reused else {}
        compared = {"previous": p.previous, "previous_of": p.previous_of} if plan.compare else {}
        rows.append(base | {"query_id": p.query_id, "task": "chunks", "state": p.state} | pair | reuse | compared)
    return rows


def _kept_plans(files: RunFiles, progress: Progress | None) -> dict[str, QuestionPlan]:
    """The questions' plans where the ledger keeps them: beside the store (Redis, memory), or in
    it; once those are gone (a run gathered long ago), as its questions.jsonl holds them."""
    store, layout = files.store, files.layout
    if progress is not None:
        kept = progress.plans(keys.plans(store.uri, layout.run_id))
        plans = {qid: QuestionPlan.model_validate_json(record) for qid, record in kept.items()}
    else:
        plans = {}
        for key in store.keys(layout.file("questions/")):
            plan = get_model(store, key, QuestionPlan)
            plans[plan.question_id] = plan
    if not plans:
        plans = {p.question_id: p for p in map(QuestionPlan.model_validate, files.questions())}
    return plans


def _question_line(plan: QuestionPlan) -> dict:
    """A question's plan as questions.jsonl keeps it (the filings chosen, in their order; an earlier
    filing ranked only to be compared with is among its pairs, not its filings)."""
    filings = [
        {"filing": p.filing, "rank": p.filing_rank, "score": p.filing_score, "reason": p.reason}
        for p in plan.pairs
        if p.previous_of is None
    ]
    return plan.model_dump(mode="json") | {"filings": filings}


def total(planned: tuple[int, int], questions: int) -> tuple[int, bool]:
    """The outcomes a question set waits for: its planned questions', one for each other."""
    count, outcomes = planned
    return outcomes + max(0, questions - count), count >= questions


def planned(state: RunState, questions: int) -> tuple[int, bool]:
    """The same, read from the questions' plans in the store (no Redis to count them beside it)."""
    plans = [get_model(state.store, k, QuestionPlan) for k in state.store.keys(state.layout.file("questions/"))]
    return total((len(plans), sum(p.outcomes for p in plans)), questions)
