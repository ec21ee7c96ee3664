"""Plan a question set over a corpus: for each question, the filings in its scope are ranked
(the filing-type prior scores the forms, the period resolver the year and quarter), and the
top-F go to segmented chunk ranking as (question, filing) pairs.

A filing's chunk input is computed once per version and segment budget and kept in the corpus,
shared by every question and run over it; the question travels in the job message. With a
pre-filter (which depends on the question) the input is stored per pair in the run instead.
A question whose scope holds no filing gets a stored failure saying so, not an error.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable

from prism.datasets import InputFileError, RowError
from prism.ingest.models import Filing, FilingMeta
from prism.models import FILING_TYPES, Failure, RunConfig
from prism.periods import choose_filings, resolve_period
from prism.questions import Question, read_questions
from prism.segmenting import TokenCounter
from prism.strategies import chunks
from producer.plan import Plan, RunSpec, _invalid, _reuse
from tasks.ranking import enqueue_level
from workers.corpus import Corpus
from workers.ledger import Outcome, RunLayout, has_outcome, outcome_keys
from workers.messages import ChunkJob
from workers.priors import PACKAGED, read_prior
from workers.settings import Settings
from workers.store import Store, open_input, open_store, put_model

NO_FILING = "no filing in scope"


def company_key(name: str) -> str:
    """Companies match whatever their case, spacing and punctuation ("Johnson & Johnson", "JOHNSON_JOHNSON")."""
    return re.sub(r"[^a-z0-9]+", "", name.lower().replace("&", ""))


def pair_id(question_id: str, filing_id: str) -> str:
    return f"{question_id}@{filing_id}"


def pair_job_id(question: str, filing: Filing, config: RunConfig) -> str:
    """Same question, same filing version, same config: same id (reused at $0 by later runs)."""
    body = json.dumps(["chunks", question, filing.id, filing.version, config.fingerprint()], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def plan_questions(
    spec: RunSpec,
    store: Store,
    settings: Settings,
    budget_spent: Callable[[], bool] = lambda: False,
    on_query: Callable[[Plan], None] = lambda plan: None,
) -> Plan:
    assert spec.corpus is not None
    started = time.monotonic()
    layout, plan, counter = RunLayout(spec.run_id), Plan(), TokenCounter()
    listed = outcome_keys(store, spec.run_id)
    corpus = Corpus(open_store(spec.corpus, settings))
    by_company: dict[str, list[tuple[str, FilingMeta]]] = {}
    everything: list[tuple[str, FilingMeta]] = []
    for fid, entry in corpus.manifest().filings.items():
        everything.append((fid, entry.meta))
        if entry.meta.company:
            by_company.setdefault(company_key(entry.meta.company), []).append((fid, entry.meta))
    prior = read_prior(settings.doc_prior or PACKAGED, settings)
    filings: dict[str, Filing] = {}
    inputs: dict[str, tuple[str, chunks.ChunkInput]] = {}
    spools = {name: tempfile.TemporaryFile() for name in ("plan.jsonl", "questions.jsonl")}
    try:
        for item in _questions(spec.input, settings):
            if isinstance(item, InputFileError | RowError):
                plan.invalid_rows += 1
                line = item.line if isinstance(item, RowError) else -1
                put_model(store, layout.invalid(spec.input, line), _invalid(spec.run_id, spec.input, item))
                continue
            q = item
            pool = by_company.get(company_key(q.scope.company), []) if q.scope.company else everything
            period = resolve_period(q.question, q.scope.period)
            predicted = prior.predict([q.question])[0]
            form_scores = {form: float(v) for form, v in zip(FILING_TYPES, predicted)}
            choices = choose_filings(period, form_scores, pool, settings.filings_per_question, q.scope.form_types)
            record = {
                "question_id": q.id,
                "question": q.question,
                "line": q.line,
                "scope": q.scope.model_dump(mode="json"),
                "period": period.label(),
                "qrels": [r.model_dump(mode="json", exclude_none=True) for r in q.qrels],
                "answer": q.answer,
                "filings": [
                    {"filing": c.filing_id, "rank": i + 1, "score": c.score, "reason": c.reason}
                    for i, c in enumerate(choices)
                ],
            }
            spools["questions.jsonl"].write(json.dumps(record).encode() + b"\n")
            if not choices:
                plan.chunks += 1
                plan.out_of_scope += 1
                state = _no_filing(store, layout, spec, q, period.label(), listed)
                row = {"query_id": q.id, "question_id": q.id, "task": "chunks", "line": q.line, "state": state}
                spools["plan.jsonl"].write(json.dumps(row | {"source": spec.input}).encode() + b"\n")
                on_query(plan)
                continue
            for rank, choice in enumerate(choices, start=1):
                if choice.filing_id not in filings:
                    filings[choice.filing_id] = corpus.get_filing(choice.filing_id)
                filing = filings[choice.filing_id]
                if filing.id not in inputs:
                    key, shared = corpus.put_input(filing, spec.config.segment_tokens, counter)
                    inputs[filing.id] = (key, corpus.chunk_input(key))
                state = _plan_pair(
                    spec, store, layout, corpus, q, filing, inputs[filing.id], counter, plan, listed, budget_spent
                )
                row = {
                    "query_id": pair_id(q.id, filing.id),
                    "question_id": q.id,
                    "task": "chunks",
                    "line": q.line,
                    "source": spec.input,
                    "state": state,
                    "filing": filing.id,
                    "version": filing.version,
                    "filing_rank": rank,
                    "filing_score": choice.score,
                }
                spools["plan.jsonl"].write(json.dumps(row).encode() + b"\n")
                on_query(plan)
            if spec.limit and plan.queries >= spec.limit:
                break
        for name, spool in spools.items():
            spool.seek(0)
            store.put(layout.file(name), spool.read())
    finally:
        for spool in spools.values():
            spool.close()
    plan.seconds = round(time.monotonic() - started, 3)
    return plan


def _questions(uri: str, settings: Settings):
    try:
        with open_input(uri, settings) as stream:
            yield from read_questions(stream, uri)
    except InputFileError as err:
        yield err
    except OSError as err:
        yield InputFileError(uri, 0, err.strerror or str(err))


def _no_filing(store: Store, layout: RunLayout, spec: RunSpec, q: Question, period: str, listed: set[str]) -> str:
    if has_outcome(listed, spec.run_id, "chunks", q.id):
        return "done"
    scope = q.scope
    what = [f"company {scope.company!r}" if scope.company else "any company"]
    if scope.form_types:
        what.append(f"form types {', '.join(scope.form_types)}")
    if period != "latest":
        what.append(f"period {period}")
    failure = Failure(
        run_id=spec.run_id,
        kind="job",
        task="chunks",
        query_id=q.id,
        line=q.line,
        source=spec.input,
        error=f"{NO_FILING}: the corpus {spec.corpus} holds no filing of {' and '.join(what)}",
    )
    put_model(store, layout.outcome(Outcome.FAILED, "chunks", q.id), failure, if_absent=True)
    return Outcome.FAILED.value


def _plan_pair(
    spec: RunSpec,
    store: Store,
    layout: RunLayout,
    corpus: Corpus,
    q: Question,
    filing: Filing,
    shared: tuple[str, chunks.ChunkInput],
    counter: TokenCounter,
    plan: Plan,
    listed: set[str],
    budget_spent: Callable[[], bool],
) -> str:
    plan.chunks += 1
    pid = pair_id(q.id, filing.id)
    if has_outcome(listed, spec.run_id, "chunks", pid):
        plan.already_done += 1
        return "done"
    jid = pair_job_id(q.question, filing, spec.config)
    if spec.reuse and _reuse(store, layout, "chunks", pid, jid):
        plan.reused += 1
        return "reused"
    if budget_spent():
        plan.not_enqueued += 1
        return Outcome.PENDING.value
    common = dict(
        run_id=spec.run_id,
        results=spec.results,
        job_id=jid,
        query_id=pid,
        line=q.line,
        source=spec.input,
        config=spec.config,
        budget_usd=spec.budget_usd,
        via=spec.via,
    )
    budget = spec.config.segment_tokens
    if spec.config.prefilter_keep:  # the kept chunks depend on the question: an input per pair
        data = chunks.prepare(q.question, [c.text for c in filing.chunks], counter, budget, spec.config.prefilter_keep)
        key = layout.input(pid)
        put_model(store, key, data)
        job = ChunkJob(input_key=key, n_candidates=len(filing.chunks), **common)
    else:
        key, data = shared
        job = ChunkJob(
            input_key=key, n_candidates=len(filing.chunks), corpus=corpus.store.uri, question=q.question, **common
        )
    level = chunks.first_level(data, spec.config.top_n, spec.config.segment_top_k, budget)
    enqueue_level(job, 0, level)
    plan.segments += len(level.segments)
    return "enqueued"
