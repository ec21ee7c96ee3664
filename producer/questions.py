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
from prism.llm import Gateway
from prism.models import FILING_TYPES, Failure, JobResult, Query, RunConfig, RunManifest, job_id
from prism.periods import choose_filings, resolve_period
from prism.prior import DocPrior
from prism.questions import Question, read_questions
from prism.segmenting import TokenCounter
from prism.strategies import chunks
from producer.plan import Plan, RunSpec, _invalid, _reuse, copy_result, prefiltered_input
from tasks.ranking import enqueue_documents, enqueue_level
from workers.corpus import Corpus
from workers.ledger import Outcome, RunLayout, has_outcome, outcome_keys
from workers.messages import ChunkJob, DocumentJob
from workers.priors import PACKAGED, read_prior
from workers.settings import Settings
from workers.store import Store, get_model, open_input, open_store, put_model

NO_FILING = "no filing in scope"


def company_key(name: str) -> str:
    """Companies match whatever their case, spacing and punctuation ("Johnson & Johnson", "JOHNSON_JOHNSON")."""
    return re.sub(r"[^a-z0-9]+", "", name.lower().replace("&", ""))


def pair_id(question_id: str, filing_id: str) -> str:
    return f"{question_id}@{filing_id}"


def pair_job_id(question: str, filing_id: str, version: str, config: RunConfig) -> str:
    """Same question, same filing version, same config: same id (reused at $0 by later runs)."""
    body = json.dumps(["chunks", question, filing_id, version, config.fingerprint()], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def plan_questions(
    spec: RunSpec,
    store: Store,
    settings: Settings,
    budget_spent: Callable[[], bool] = lambda: False,
    on_query: Callable[[Plan], None] = lambda plan: None,
    gateway: Gateway | None = None,
) -> Plan:
    assert spec.corpus is not None
    started = time.monotonic()
    layout, plan, counter = RunLayout(spec.run_id), Plan(), TokenCounter()
    listed = outcome_keys(store, spec.run_id)
    corpus = Corpus(open_store(spec.corpus, settings))
    by_company: dict[str, list[tuple[str, FilingMeta]]] = {}
    everything: list[tuple[str, FilingMeta]] = []
    manifest = corpus.manifest()
    for fid, entry in manifest.filings.items():
        everything.append((fid, entry.meta))
        if entry.meta.company:
            by_company.setdefault(company_key(entry.meta.company), []).append((fid, entry.meta))
    prior = read_prior(settings.doc_prior or PACKAGED, settings)
    versions = {fid: entry.latest for fid, entry in manifest.filings.items()}
    store.put(layout.file("corpus.json"), json.dumps(versions, indent=1).encode())
    earlier = Earlier.load(store, spec.since, spec.config, settings) if spec.since else None
    filings: dict[str, Filing] = {}
    inputs: dict[str, tuple[str, chunks.ChunkInput]] = {}

    def shared_input(fid: str) -> tuple[Filing, tuple[str, chunks.ChunkInput]]:
        """A filing and its shared input, loaded once, and only for a pair that is ranked."""
        if fid not in filings:
            filings[fid] = corpus.get_filing(fid)
            key, shared = corpus.put_input(filings[fid], spec.config.segment_tokens, counter)
            inputs[fid] = (key, corpus.as_chunk_input(filings[fid], shared))
        return filings[fid], inputs[fid]

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
            before = earlier.unchanged(q, pool, versions) if earlier else None
            if earlier is not None and before is not None and earlier.copy(store, layout, before, listed):
                plan.chunks += len(before["filings"])
                plan.reused += len(before["filings"])
                spools["questions.jsonl"].write(json.dumps(before | {"line": q.line}).encode() + b"\n")
                for f in before["filings"]:
                    row = {
                        "query_id": pair_id(q.id, f["filing"]),
                        "question_id": q.id,
                        "task": "chunks",
                        "line": q.line,
                    }
                    row |= {"source": spec.input, "state": "reused", "since": earlier.run_id, "filing": f["filing"]}
                    row |= {"version": versions[f["filing"]], "filing_rank": f["rank"], "filing_score": f["score"]}
                    spools["plan.jsonl"].write(json.dumps(row).encode() + b"\n")
                on_query(plan)
                continue
            if earlier is not None:
                earlier.note_planned(q)
            if spec.config.doc_ranker == "prior":
                form_scores, ranked_by = _prior_scores(prior, q), "prior"
            else:
                scored, state = _ranked_forms(spec, store, layout, q, prior, plan, listed, budget_spent)
                row = {"query_id": q.id, "question_id": q.id, "task": "documents", "line": q.line, "state": state}
                spools["plan.jsonl"].write(json.dumps(row | {"source": spec.input}).encode() + b"\n")
                if scored is None:  # its document ranking is on the fleet: its filings are chosen next pass
                    on_query(plan)
                    continue
                form_scores, ranked_by = scored
            period = resolve_period(q.question, q.scope.period)
            choices = choose_filings(period, form_scores, pool, settings.filings_per_question, q.scope.form_types)
            record = {
                "question_id": q.id,
                "question": q.question,
                "line": q.line,
                "scope": q.scope.model_dump(mode="json"),
                "period": period.label(),
                "forms_ranked_by": ranked_by,
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
                fid = choice.filing_id
                state = _plan_pair(
                    spec,
                    store,
                    layout,
                    corpus,
                    q,
                    fid,
                    versions[fid],
                    shared_input,
                    counter,
                    plan,
                    listed,
                    budget_spent,
                    gateway,
                )
                row = {
                    "query_id": pair_id(q.id, fid),
                    "question_id": q.id,
                    "task": "chunks",
                    "line": q.line,
                    "source": spec.input,
                    "state": state,
                    "filing": fid,
                    "version": versions[fid],
                    "filing_rank": rank,
                    "filing_score": choice.score,
                }
                spools["plan.jsonl"].write(json.dumps(row).encode() + b"\n")
                on_query(plan)
            if spec.limit and plan.queries >= spec.limit:
                break
        if earlier is not None:
            plan.changes = earlier.changes(versions)
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


def _ranked_forms(
    spec: RunSpec,
    store: Store,
    layout: RunLayout,
    q: Question,
    prior: DocPrior,
    plan: Plan,
    listed: set[str],
    budget_spent: Callable[[], bool],
) -> tuple[tuple[dict[str, float], str] | None, str]:
    """The form types' scores from the question's document ranking (a document job of this run,
    ranked on the fleet by the configured ranker), and its plan state; no scores while it is not
    done (enqueued here when it has no outcome yet). A ranking that failed falls back to the
    prior, and says so."""
    plan.documents += 1
    job = Query(id=q.id, task="documents", question=q.question, candidates=list(FILING_TYPES), line=q.line)
    jid = job_id(job, spec.config)
    done = has_outcome(listed, spec.run_id, "documents", q.id)
    if done or (spec.reuse and _reuse(store, layout, "documents", q.id, jid)):
        plan.already_done += done
        plan.reused += not done
        state = "done" if done else "reused"
        try:
            ranking = get_model(store, layout.result("documents", q.id), JobResult).ranking
        except KeyError:  # it failed: its failure is stored, and the prior stands in
            return (_prior_scores(prior, q), f"prior ({spec.config.doc_ranker} document ranking failed)"), state
        positions = {i: p for p, i in enumerate(ranking.indices)}
        n = len(FILING_TYPES)
        scores = {f: float(n - positions.get(i, n)) for i, f in enumerate(FILING_TYPES)}
        return (scores, str(spec.config.doc_ranker)), state
    plan.awaiting += 1
    if budget_spent():
        plan.not_enqueued += 1
        return None, Outcome.PENDING.value
    common = dict(run_id=spec.run_id, results=spec.results, job_id=jid, query_id=q.id, line=q.line, source=spec.input)
    enqueue_documents(
        DocumentJob(
            question=q.question,
            candidates=job.candidates,
            config=spec.config,
            budget_usd=spec.budget_usd,
            via=spec.via,
            **common,
        )
    )
    return None, "enqueued"


def _prior_scores(prior: DocPrior, q: Question) -> dict[str, float]:
    return {f: float(v) for f, v in zip(FILING_TYPES, prior.predict([q.question])[0])}


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
    fid: str,
    version: str,
    shared_input: Callable[[str], tuple[Filing, tuple[str, chunks.ChunkInput]]],
    counter: TokenCounter,
    plan: Plan,
    listed: set[str],
    budget_spent: Callable[[], bool],
    gateway: Gateway | None,
) -> str:
    plan.chunks += 1
    pid = pair_id(q.id, fid)
    if has_outcome(listed, spec.run_id, "chunks", pid):
        plan.already_done += 1
        return "done"
    jid = pair_job_id(q.question, fid, version, spec.config)
    if spec.reuse and _reuse(store, layout, "chunks", pid, jid):
        plan.reused += 1
        return "reused"
    if budget_spent():
        plan.not_enqueued += 1
        return Outcome.PENDING.value
    filing, shared = shared_input(fid)
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
    if spec.config.prefilters:  # the kept chunks depend on the question: an input per pair
        texts = [c.text for c in filing.chunks]
        counts = corpus.counts(filing, counter)  # the ingest's, not counted again
        key, data = prefiltered_input(spec, store, pid, jid, q.question, texts, counter, gateway, counts)
        job = ChunkJob(input_key=key, n_candidates=len(filing.chunks), **common)
    else:
        key, data = shared
        job = ChunkJob(
            input_key=key, n_candidates=len(filing.chunks), corpus=corpus.store.uri, question=q.question, **common
        )
    level = chunks.first_level(data, spec.config.top_n, spec.config.segment_top_k, spec.config.segment_budget)
    enqueue_level(job, 0, level)
    plan.segments += len(level.segments)
    return "enqueued"


class Earlier:
    """The last run over this corpus, for a nightly `--new` run: a question whose text and scope
    are the same, with every filing in its scope at the version that run saw, is not planned
    again; its pairs' results are copied from that run at $0."""

    def __init__(self, run_id: str, questions: dict[str, dict], versions: dict[str, str], same_config: bool):
        self.run_id, self.questions, self.versions, self.same_config = run_id, questions, versions, same_config
        self.planned: dict[str, int] = {"new_questions": 0, "changed_questions": 0, "questions_with_changed_filings": 0}
        self.reused_questions = 0

    @classmethod
    def load(cls, store: Store, run_id: str, config: RunConfig, settings: Settings) -> Earlier:
        layout = RunLayout(run_id)
        manifest = get_model(store, layout.file("manifest.json"), RunManifest)
        lines = store.get(layout.file("questions.jsonl")).decode().splitlines()
        questions = {r["question_id"]: r for r in map(json.loads, filter(None, lines))}
        versions = json.loads(store.get(layout.file("corpus.json")))
        top_f = manifest.settings.get("filings_per_question")
        same = manifest.config.fingerprint() == config.fingerprint() and top_f == settings.filings_per_question
        return cls(run_id, questions, versions, same)

    def unchanged(self, q: Question, pool: list[tuple[str, FilingMeta]], versions: dict[str, str]) -> dict | None:
        """The earlier record of this question when nothing it depends on changed."""
        before = self.questions.get(q.id)
        if not self.same_config or before is None:
            return None
        if before["question"] != q.question or before["scope"] != q.scope.model_dump(mode="json"):
            return None
        in_scope = {fid for fid, _ in pool}
        if any(self.versions.get(fid) != versions[fid] for fid in in_scope):
            return None
        if not before["filings"] or any(f["filing"] not in in_scope for f in before["filings"]):
            return None  # no filing then (one may have come), or its filing has left the corpus
        return before

    def copy(self, store: Store, layout: RunLayout, before: dict, listed: set[str]) -> bool:
        """Copy every pair's result of the earlier run into this one; False (nothing copied) when
        one of them has none, so the question is planned as new."""
        earlier = RunLayout(self.run_id)
        pids = [pair_id(before["question_id"], f["filing"]) for f in before["filings"]]
        if not all(store.exists(earlier.result("chunks", pid)) for pid in pids):
            return False
        for pid in pids:
            if not has_outcome(listed, layout.run_id, "chunks", pid):
                copy_result(store, layout, "chunks", pid, earlier.result("chunks", pid))
        self.reused_questions += 1
        return True

    def note_planned(self, q: Question) -> None:
        before = self.questions.get(q.id)
        if before is None:
            self.planned["new_questions"] += 1
        elif before["question"] != q.question or before["scope"] != q.scope.model_dump(mode="json"):
            self.planned["changed_questions"] += 1
        else:
            self.planned["questions_with_changed_filings"] += 1

    def changes(self, versions: dict[str, str]) -> dict:
        new = sum(1 for fid in versions if fid not in self.versions)
        changed = sum(1 for fid, v in versions.items() if fid in self.versions and self.versions[fid] != v)
        return {
            "since": self.run_id,
            "same_config": self.same_config,
            "new_filings": new,
            "changed_filings": changed,
            "removed_filings": sum(1 for fid in self.versions if fid not in versions),
            "unchanged_questions": self.reused_questions,
            **self.planned,
        }
