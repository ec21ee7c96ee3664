"""A question set over a corpus, from the producer's side: stream the set, check each line, and
enqueue one planning task per question (tasks/planning.py plans it on the fleet: forms, period,
filings, inputs, chunk ranking). Nothing heavier happens here: no filing is loaded and no model
is run. Once the run is over, the questions' plans are gathered into the run's plan.jsonl and
questions.jsonl, and a `--new` run's changes are counted from them.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import cache

from celery import Celery

from prism.corpus.view import CorpusView
from prism.datasets import InputFileError, RowError
from prism.ingest.models import FilingEntry
from prism.runs.planning import question_job_id
from prism.runs.questions import Question
from producer.inputs import invalid_failure, question_items
from producer.plan import Plan
from producer.spec import RunError, RunSpec, open_corpus
from workers.app import send
from workers.catalog import VersionGone, pinned_text
from workers.corpus import Corpus
from workers.ledger import Ledger
from workers.messages import Priority, QuestionJob, TaskName
from workers.runfiles import RunFiles
from workers.settings import Settings
from workers.store import Store


def enqueue_questions(app: Celery, spec: RunSpec, store: Store, ledger: Ledger, settings: Settings) -> Plan:
    """One planning task per valid question; a bad line is an input failure naming its field."""
    assert spec.corpus is not None
    started = time.monotonic()
    plan = Plan()
    corpus = open_corpus(spec.corpus, settings)
    spec = replace(spec, corpus=corpus.store.uri)  # a folder by its absolute path: workers run elsewhere
    pinned = spec.corpus_versions if spec.corpus_versions is not None else corpus.catalog.versions()
    corpus = Corpus(corpus.store, pinned)  # a resume plans where the run started, whatever came since
    try:
        versions = corpus.catalog.versions()
    except VersionGone as err:
        raise RunError(
            f"--corpus {spec.corpus}: {err}: run {spec.run_id} cannot be planned as it started; "
            "start a new run (`prism run --new` reuses its results)"
        ) from None
    view = cache(corpus.view)  # read when a qrel names no filing
    plan.corpus_version, plan.corpus_versions = versions.get("filings"), versions
    plan.corpus_at = corpus.catalog.newest_at()
    if spec.since is not None:
        plan.changes = filing_changes(store, corpus, spec)
    rows: list[dict] = []
    warnings: list[dict] = []  # qrels that cannot be judged: the question runs, the line is named
    for item in question_items(spec.input, settings):
        if isinstance(item, InputFileError | RowError):
            plan.invalid_rows += 1
            line = item.line if isinstance(item, RowError) else -1
            ledger.invalid(invalid_failure(spec.run_id, spec.input, item), spec.input, line)
            continue
        warnings += _warned(spec.input, item, corpus, view, plan)
        send(app, TaskName.PLAN_QUESTION, question_job(spec, item, pinned_text(versions)), Priority.NEW_WORK)
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


def _warned(source: str, q: Question, corpus: Corpus, view: Callable[[], CorpusView], plan: Plan) -> list[dict]:
    """The question's qrels that cannot be judged, as warnings; the first few said. A filing
    its qrels name is looked up by id; a missing one is matched against its scope's filings."""
    found = []
    heads = {qrel.filing: corpus.head(qrel.filing) for qrel in q.qrels}
    held = {fid: head for fid, head in heads.items() if head is not None}
    nearby = [fid for fid, _ in view().scope(q.scope.company)] if q.scope.company and len(held) < len(heads) else []
    for field, message in qrel_warnings(q, held, nearby):
        plan.warnings += 1
        found.append({"source": source, "line": q.line, "field": field, "message": message, "query_id": q.id})
        if len(plan.said) < SAID:
            plan.said.append(f"{source} line {q.line}, field '{field}': {message}")
    return found


SAID = 5  # qrel warnings printed; every one is in the run's warnings.jsonl


def qrel_warnings(
    q: Question, filings: dict[str, FilingEntry], nearby: Iterable[str] = ()
) -> Iterator[tuple[str, str]]:
    """(field, why) for each qrel that cannot be judged against the corpus (``filings``: the
    heads of the filings its qrels name that the corpus holds; ``nearby``, other ids to suggest):
    a filing id it does not hold (the ids `prism corpus ls` lists), a page past the filing's last or of a filing with no pages, a
    chunk id of another filing. Such a qrel is not judged; it is never a silent 0."""
    for i, qrel in enumerate(q.qrels):
        entry = filings.get(qrel.filing)
        if entry is None:
            close = difflib.get_close_matches(qrel.filing, [*filings, *nearby], n=1, cutoff=0.6)
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


def question_job(spec: RunSpec, q: Question, corpus_version: str) -> QuestionJob:
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
        corpus_version=corpus_version,
        reuse=spec.reuse,
        since=spec.since,
    )


def filing_changes(store: Store, corpus: Corpus, spec: RunSpec) -> dict:
    """The filings new and changed since the run a `--new` run starts from (read from the
    catalogue's rows written after it planned, not from the corpus), and whether it ran with
    the same configuration."""
    assert spec.since is not None
    before = RunFiles(store, spec.since).manifest()
    new = changed = 0
    if (at := before.corpus_at) is not None:
        for head in {h.id: h for h in corpus.catalog.since(at)}.values():
            latest = next(v for v in head.versions if v.version == head.latest)
            if all(v.ingested_at > at for v in head.versions):
                new += 1
            elif latest.ingested_at > at:
                changed += 1
    return {
        "since": spec.since,
        "same_config": before.config.plan_fingerprint() == spec.config.plan_fingerprint(),
        "new_filings": new,
        "changed_filings": changed,
        "removed_filings": 0,
    }
