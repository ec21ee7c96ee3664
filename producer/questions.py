"""A question set over a corpus, from the producer's side: stream the set, check each line, and
enqueue one planning task per question (tasks/planning.py plans it on the fleet: forms, period,
filings, inputs, chunk ranking). Nothing heavier happens here: no filing is loaded and no model
is run. Once the run is over, the questions' plans are gathered into the run's plan.jsonl and
questions.jsonl, and a `--new` run's changes are counted from them.
"""

from __future__ import annotations

import difflib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

from celery import Celery

from prism.datasets import InputFileError, RowError
from prism.ingest.models import FilingEntry
from prism.models import QuestionPlan
from prism.planning import question_job_id
from prism.questions import Question, read_questions
from producer.plan import Plan, invalid_failure
from producer.spec import RunError, RunSpec
from workers import keys
from workers.app import send
from workers.corpus import Corpus
from workers.ledger import Ledger, Progress
from workers.messages import Priority, QuestionJob, TaskName
from workers.runfiles import RunFiles
from workers.settings import Settings
from workers.store import Store, get_model, open_input, open_store


def enqueue_questions(app: Celery, spec: RunSpec, store: Store, ledger: Ledger, settings: Settings) -> Plan:
    """One planning task per valid question; a bad line is an input failure naming its field."""
    assert spec.corpus is not None
    started = time.monotonic()
    plan = Plan()
    corpus = Corpus(open_store(spec.corpus, settings))
    manifest = corpus.manifest()
    if not manifest.filings:
        raise RunError(f"--corpus {spec.corpus}: no filings there; ingest some first (prism ingest FILES --corpus ...)")
    spec = replace(spec, corpus=corpus.store.uri)  # a folder by its absolute path: workers run elsewhere
    versions = {fid: entry.latest for fid, entry in manifest.filings.items()}
    plan.corpus_versions = corpus.put_versions(versions)
    at = manifest.written_at.isoformat() if manifest.written_at else ""
    if spec.since is not None:
        plan.changes = filing_changes(store, corpus, spec, versions)
    rows: list[dict] = []
    warnings: list[dict] = []  # qrels that cannot be judged: the question runs, the line is named
    for item in question_items(spec.input, settings):
        if isinstance(item, InputFileError | RowError):
            plan.invalid_rows += 1
            line = item.line if isinstance(item, RowError) else -1
            ledger.invalid(invalid_failure(spec.run_id, spec.input, item), spec.input, line)
            continue
        warnings += _warned(spec.input, item, manifest.filings, plan)
        send(app, TaskName.PLAN_QUESTION, question_job(spec, item, at), Priority.NEW_WORK)
        plan.questions += 1
        rows.append(
            {"query_id": item.id, "question_id": item.id, "task": "chunks", "line": item.line}
            | {"source": spec.input, "state": "enqueued"}
        )
        if spec.config.limit and plan.questions >= spec.config.limit:
            break
    files = RunFiles(store, spec.run_id)
    files.put_enqueued(rows)
    files.put_warnings(warnings)
    plan.seconds = round(time.monotonic() - started, 3)
    return plan


def _warned(source: str, q: Question, filings: dict[str, FilingEntry], plan: Plan) -> list[dict]:
    """The question's qrels that cannot be judged, as warnings; the first few said."""
    found = []
    for field, message in qrel_warnings(q, filings):
        plan.warnings += 1
        found.append({"source": source, "line": q.line, "field": field, "message": message, "query_id": q.id})
        if len(plan.said) < SAID:
            plan.said.append(f"{source} line {q.line}, field '{field}': {message}")
    return found


SAID = 5  # qrel warnings printed; every one is in the run's warnings.jsonl


def qrel_warnings(q: Question, filings: dict[str, FilingEntry]) -> Iterator[tuple[str, str]]:
    """(field, why) for each qrel that cannot be judged against the corpus: a filing id it does
    not hold (the ids `prism corpus ls` lists), a page past the filing's last or of a filing with
    no pages, a chunk id of another filing. Such a qrel is not judged; it is never a silent 0."""
    for i, qrel in enumerate(q.qrels):
        entry = filings.get(qrel.filing)
        if entry is None:
            close = difflib.get_close_matches(qrel.filing, list(filings), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else " (prism corpus ls lists them)"
            yield f"qrels[{i}].filing", f"'{qrel.filing}' is no filing id of the corpus{hint}: not judged"
            continue
        pages = next((v.pages for v in entry.versions if v.version == entry.latest), 0)
        if qrel.page is not None and not pages:
            yield f"qrels[{i}].page", f"'{qrel.filing}' has no pages: this page qrel is not judged"
        elif qrel.page is not None and qrel.page > pages:
            yield f"qrels[{i}].page", f"page {qrel.page} is past the last of '{qrel.filing}' ({pages}): not judged"
        if qrel.chunk is not None and not qrel.chunk.startswith(f"{qrel.filing}:"):
            yield f"qrels[{i}].chunk", f"'{qrel.chunk}' is no chunk of '{qrel.filing}': not judged"


def question_job(spec: RunSpec, q: Question, corpus_at: str) -> QuestionJob:
    assert spec.corpus is not None
    return QuestionJob(
        run_id=spec.run_id,
        results=spec.results,
        job_id=question_job_id(q, spec.config),
        query_id=q.id,
        line=q.line,
        source=spec.input,
        config=spec.config,
        question=q,
        corpus=spec.corpus,
        corpus_at=corpus_at,
        reuse=spec.reuse,
        since=spec.since,
    )


def question_items(uri: str, settings: Settings) -> Iterator[Question | RowError | InputFileError]:
    """Each line of a question set as a Question or what is wrong with it (a file that cannot be
    read: once, after the lines read before the failure)."""
    try:
        with open_input(uri, settings) as stream:
            yield from read_questions(stream, uri)
    except InputFileError as err:
        yield err
    except OSError as err:
        yield InputFileError(uri, 0, err.strerror or str(err))


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
        rows.append(base | {"query_id": p.query_id, "task": "chunks", "state": p.state} | pair | reuse)
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
    """A question's plan as questions.jsonl keeps it (the filings in their chosen order)."""
    filings = [
        {"filing": p.filing, "rank": p.filing_rank, "score": p.filing_score, "reason": p.reason} for p in plan.pairs
    ]
    return plan.model_dump(mode="json") | {"filings": filings}


def filing_changes(store: Store, corpus: Corpus, spec: RunSpec, versions: dict[str, str]) -> dict:
    """The filings new, changed and removed since the run a `--new` run starts from, and
    whether it ran with the same configuration."""
    assert spec.since is not None
    before = RunFiles(store, spec.since).manifest()
    earlier = corpus.versions(before.corpus_versions) if before.corpus_versions else {}
    return {
        "since": spec.since,
        "same_config": before.config.plan_fingerprint() == spec.config.plan_fingerprint(),
        "new_filings": sum(1 for fid in versions if fid not in earlier),
        "changed_filings": sum(1 for fid, v in versions.items() if fid in earlier and earlier[fid] != v),
        "removed_filings": sum(1 for fid in earlier if fid not in versions),
    }


def question_changes(changes: dict, plans: list[QuestionPlan]) -> dict:
    """The filing changes with how the questions stood against the earlier run."""
    stood = Counter(p.since for p in plans)
    return changes | {
        "unchanged_questions": stood["unchanged"],
        "new_questions": stood["new_question"],
        "changed_questions": stood["changed_question"],
        "questions_with_changed_filings": stood["changed_filings"],
    }
