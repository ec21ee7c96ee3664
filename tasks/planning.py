"""The planning tasks: one question of a set over a corpus, or one chunk row, planned on the fleet.

A question's task ranks the filing types (the prior here; any other ranker as a document job this
task follows), resolves the period, chooses the filings, and fans each out: its chunk input made
once, then its segmented chunk ranking enqueued. A chunk row is fanned out the same way. A
question unchanged since the run `--new` starts from, or a pair that any run ranked with the same
job id, reuses that result at $0. Every step is idempotent by key, so a redelivered task (a killed
worker) or a re-enqueued one (a resume) adds nothing twice; what ends a question here is written
by the ledger, like every other outcome.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Literal

import structlog
from celery import shared_task

from prism.corpus.periods import Choice
from prism.corpus.view import CorpusView
from prism.ingest.models import Chunking
from prism.llm import BudgetExhausted, Gateway, recording
from prism.models import FILING_TYPES, Considered, JobResult, PlannedPair, Query, QuestionPlan, RunConfig, job_id
from prism.ranking.hybrid import dense_scorer
from prism.ranking.strategies import chunks
from prism.runs.planning import Previous, choose, compare_mode, in_scope, pair_id, pair_job_id, previous_filings
from prism.runs.questions import Question
from prism.segmenting import TokenCounter
from tasks.base import JobTask, QueryTask
from tasks.ranking import enqueue_level, rank_documents
from workers import inputs
from workers.corpus import Corpus
from workers.ledger import Ledger
from workers.messages import ChunkJob, DocumentJob, Job, Priority, QuestionJob, TaskName
from workers.runfiles import Outcome, RunFiles, RunLayout
from workers.runtime import Runtime
from workers.store import Store, get_model, result_key

log = structlog.get_logger("prism")
Standing = Literal["unchanged", "new_question", "changed_question", "changed_filings", "lost_result"]
DocumentState = Literal["done", "reused"]


class PlanTask(JobTask):
    message = QuestionJob

    def failed(self, job: QuestionJob, args: tuple, error: str) -> None:
        ledger = self.runtime.ledger(job.results)
        ledger.failure(job, error, self.paid(job))
        ledger.planned(job, _record(job, error=error), 1)

    def skipped(self, job: QuestionJob, args: tuple, error: None) -> None:
        ledger = self.runtime.ledger(job.results)
        ledger.skipped(job, self.paid(job))
        ledger.planned(job, _record(job, error="the run's budget is spent"), 1)


@shared_task(name=TaskName.PLAN_QUESTION, bind=True, base=PlanTask, ignore_result=True)
def plan_question(self: PlanTask, message: dict) -> None:
    job, rt = QuestionJob.model_validate(message), self.runtime
    ledger = rt.ledger(job.results)
    view: CorpusView = rt.kept(
        ("corpus", job.corpus, job.corpus_version), lambda: _view(rt, job.corpus, job.corpus_version)
    )
    scoped, mode = in_scope(job.question, view), compare_mode(job.question, job.config)
    plan = _record(job, pool=view.pool_digest(scoped.pool), period=scoped.period.label(), compare=mode)
    if job.since is not None and _reused_since(rt, job, plan, ledger):
        return
    scores: dict[str, float] = {}
    if scoped.pool:  # a scope with no filing pays for no form ranking
        forms = _forms(rt, ledger, job, message)
        if forms is None:
            return  # its document job is on the fleet and plans the question again when it is done
        scores, plan.forms_ranked_by, plan.documents = forms
    choices, considered, plan.error = choose(job.question, scoped, scores, job.config, view, job.corpus)
    plan.considered = _considered(considered, choices)
    if plan.error is not None and not ledger.has_outcome(job):
        ledger.failure(job, plan.error, self.paid(job))
    versions = view.versions_of(scoped.pool, [c.filing_id for c in choices])
    plan.pairs = [_pair(rt, ledger, job, rank, c, versions[c.filing_id]) for rank, c in enumerate(choices, 1)]
    if mode is not None and choices:
        found = previous_filings(mode, view, scoped.pool, [c.filing_id for c in choices])
        plan.pairs += _previous_pairs(rt, ledger, job, plan.pairs, found)
    ledger.planned(job, plan, plan.outcomes)
    log.info("question planned", filings=[p.filing for p in plan.pairs], states=[p.state for p in plan.pairs])


def _considered(considered: list[Choice], choices: list[Choice]) -> list[Considered]:
    ranked = {c.filing_id for c in choices}
    return [
        Considered(
            filing=c.filing_id,
            score=c.score,
            period_fit=c.period_fit,
            form_score=c.form_score,
            recency=c.recency,
            ranked=c.filing_id in ranked,
        )
        for c in considered
    ]


def _view(rt: Runtime, uri: str, version: str) -> CorpusView:
    """The corpus as the run planned it: each catalogue table at the version the run named."""
    return Corpus.at(rt.store(uri), version).view()


def _reused_since(rt: Runtime, job: QuestionJob, plan: QuestionPlan, ledger: Ledger) -> bool:
    """A `--new` run's question unchanged since the run it starts from: that run's results are
    this one's, and the question is planned (True). Else how it stands is noted on its plan."""
    assert job.since is not None
    earlier: Earlier = rt.kept(("earlier", job.results, job.since), lambda: Earlier.read(rt, job))
    plan.since = earlier.compare(job, plan)
    if plan.since == "unchanged" and earlier.reuse(job, plan, ledger):
        ledger.planned(job, plan, plan.outcomes)
        return True
    if plan.since == "unchanged":  # an earlier result is gone: ranked again, and counted
        plan.since = "lost_result"
    return False


def _pair(rt: Runtime, ledger: Ledger, job: QuestionJob, rank: int, choice: Choice, version: str) -> PlannedPair:
    """One chosen filing of a question, at its version: its pair done, reused, left pending by
    the budget, or enqueued for ranking."""
    q, fid = job.question, choice.filing_id
    pair = ChunkJob(
        **_common(job),
        job_id=pair_job_id(q.question, fid, version, job.config),
        query_id=pair_id(q.id, fid),
        input_key="",
        n_candidates=0,
    )
    planned = PlannedPair(
        query_id=pair.query_id,
        filing=fid,
        version=version,
        filing_rank=rank,
        filing_score=choice.score,
        reason=choice.reason,
        state="enqueued",
    )
    budget = rt.budget(job)
    done = ledger.has_outcome(pair)
    found = ledger.find(pair) if job.reuse and not done else None
    if done:
        planned.state = "done"
    elif found is not None and found.key and (origin := ledger.reference(pair, found.key)):
        planned.state, planned.reused, planned.since = "reused", found.key, origin
    elif budget is not None and budget.exhausted():
        ledger.skipped(pair, [])
        planned.state = "pending"
    else:
        source = FilingChunks(Corpus(rt.store(job.corpus)), fid, version, rt.counter(Chunking().encoding))
        planned.segments = fan_out(rt, pair.model_copy(update={"question": q.question}), source)
        planned.lost = found.lost if found is not None else None
    return planned


def _previous_pairs(
    rt: Runtime, ledger: Ledger, job: QuestionJob, chosen: list[PlannedPair], found: list[Previous]
) -> list[PlannedPair]:
    """Each chosen filing's earlier one, named on its pair, and ranked as a pair of its own where
    it is not chosen too: under the job id it has as a chosen filing, so one ranked for the
    question before (an earlier night's choice) is reused at $0. A company with none is no
    failure: the pair's reason says so."""
    by_filing = {p.filing: p for p in chosen}
    added: list[PlannedPair] = []
    for each in found:
        pair = by_filing[each.filing]
        pair.previous = each.previous
        pair.reason = f"{pair.reason}; {each.reason if each.previous is None else f'compared with {each.reason}'}"
        if each.previous is None or each.previous in by_filing:
            continue
        choice = Choice(each.previous, 0.0, 0.0, 0.0, f"the earlier filing of {each.filing}: {each.reason}")
        extra = _pair(rt, ledger, job, len(chosen) + len(added) + 1, choice, each.version)
        extra.previous_of = each.filing
        by_filing[extra.filing] = extra
        added.append(extra)
    return added


class ChunkPlanTask(QueryTask):
    message = ChunkJob


@shared_task(name=TaskName.PLAN_CHUNKS, bind=True, base=ChunkPlanTask, ignore_result=True)
def plan_chunks(self: ChunkPlanTask, message: dict) -> None:
    """A chunk row of a rows input: its input made (or read: rows over one filing share it),
    then its segments enqueued, as a question's pair is planned above. ``input_key`` names the
    row's candidates as the producer stored them."""
    job, rt = ChunkJob.model_validate(message), self.runtime
    source = RowChunks(RunFiles(rt.store(job.results), job.run_id), job.input_key, rt.counter(Chunking().encoding))
    log.info("chunk query planned", segments=fan_out(rt, job, source))


# -- what a question is planned from ------------------------------------------------------------


@dataclass(frozen=True)
class Earlier:
    """The run a `--new` run starts from: each question as it was planned there."""

    run_id: str
    questions: dict[str, dict]
    config: RunConfig

    @classmethod
    def read(cls, rt: Runtime, job: QuestionJob) -> Earlier:
        assert job.since is not None
        files = RunFiles(rt.store(job.results), job.since)
        return cls(job.since, {r["question_id"]: r for r in files.questions()}, files.manifest().config)

    def compare(self, job: QuestionJob, plan: QuestionPlan) -> Standing:
        """How the question stands against the earlier run: unchanged (same text and scope,
        every filing in its scope at the same version, the same configuration) or why not."""
        before = self.questions.get(plan.question_id)
        if before is None:
            return "new_question"
        if before["question"] != plan.question or before["scope"] != plan.scope:
            return "changed_question"
        same = self.config.plan_fingerprint() == job.config.plan_fingerprint()
        if not same or before.get("pool") != plan.pool or not before.get("pairs"):
            return "changed_filings"
        if before.get("compare") != plan.compare:  # the question's own compare changed
            return "changed_question"
        return "unchanged"

    def reuse(self, job: QuestionJob, plan: QuestionPlan, ledger: Ledger) -> bool:
        """The earlier run's results of the question's pairs, as this run's; False when one is
        missing (nothing is reused then: the question is ranked again)."""
        before = self.questions[plan.question_id]
        pairs = [PlannedPair.model_validate(p) for p in before["pairs"]]
        origins = [o for p in pairs if (o := self._origin(job, plan, p, ledger.store))]
        if len(origins) < len(pairs):
            return False
        for p, origin in zip(pairs, origins, strict=True):
            pair = ChunkJob(**_common(job), job_id="", query_id=p.query_id, input_key="", n_candidates=0)
            if not ledger.has_outcome(pair):
                ledger.reference(pair, origin)
            since = p.since if p.reused else self.run_id
            update = {"state": "reused", "since": since, "reused": origin, "segments": 0, "lost": None}
            plan.pairs.append(p.model_copy(update=update))
        plan.period, plan.forms_ranked_by = before.get("period", ""), before.get("forms_ranked_by", "")
        plan.considered = [Considered.model_validate(c) for c in before.get("considered", [])]
        return True

    def _origin(self, job: QuestionJob, plan: QuestionPlan, pair: PlannedPair, store: Store) -> str | None:
        """Where a pair's earlier result is kept: the shared copy under its job id (which outlives
        a pruned run), else the result that run reused in turn or its own, copied back into the
        shared place (a repair); None when each is gone."""
        shared = result_key(pair_job_id(plan.question, pair.filing, pair.version, job.config))
        own = RunLayout(self.run_id).result("chunks", pair.query_id)
        for key in dict.fromkeys(k for k in (shared, pair.reused, own) if k):
            if store.exists(key):
                if key != shared:
                    store.put(shared, store.get(key))
                return shared
        return None


# -- the steps ------------------------------------------------------------------------------------


def _forms(
    rt: Runtime, ledger: Ledger, job: QuestionJob, message: dict
) -> tuple[dict[str, float], str, DocumentState | None] | None:
    """The form types' scores, who ranked them, and the state of the question's document job;
    None while that job runs (enqueued here, with this task to follow it). A document ranking
    that failed falls back to the prior, and says so."""
    config, q = job.config, job.question
    if config.doc_ranker == "prior":
        return _prior_scores(rt, config, q), "prior", None
    query = Query(id=q.id, task="documents", question=q.question, candidates=list(FILING_TYPES), line=q.line)
    common = _common(job) | {"job_id": job_id(query, config), "query_id": q.id}
    doc = DocumentJob(**common, question=q.question, candidates=query.candidates)
    layout = RunLayout(job.run_id)
    state: DocumentState
    if ledger.has_outcome(doc):
        state = "done"
    elif job.reuse and ledger.reuse_by_id(doc):
        state = "reused"
    elif ledger.store.exists(layout.outcome(Outcome.SKIPPED, "documents", q.id)):
        raise BudgetExhausted("the run's budget stopped its document ranking")
    else:
        follow = plan_question.si(message).set(priority=Priority.FOLLOW_UP)
        rank_documents.apply_async((doc.model_dump(mode="json"),), priority=Priority.FIRST_ROUND, link=follow)
        return None
    try:
        ranking = get_model(ledger.store, layout.result("documents", q.id), JobResult).ranking
    except KeyError:  # it failed: its failure is stored, and the prior stands in
        return _prior_scores(rt, config, q), f"prior ({config.doc_ranker} document ranking failed)", state
    positions = {i: p for p, i in enumerate(ranking.indices)}
    n = len(FILING_TYPES)
    return {f: float(n - positions.get(i, n)) for i, f in enumerate(FILING_TYPES)}, str(config.doc_ranker), state


def _prior_scores(rt: Runtime, config: RunConfig, q: Question) -> dict[str, float]:
    return rt.prior(config).form_scores(q.question)


@dataclass(frozen=True)
class FilingChunks:
    """A corpus filing version's chunks, for a question over it."""

    corpus: Corpus
    filing_id: str
    version: str
    counter: TokenCounter

    @property
    def home(self) -> str | None:
        return self.corpus.store.uri  # a shared input names the corpus store it lives in

    def texts(self) -> tuple[list[str], list[int] | None]:
        filing = self.corpus.get_filing(self.filing_id, self.version)
        return [c.text for c in filing.chunks], inputs.counts(filing, self.counter)

    def shared(self, budget: int) -> tuple[str, list[int]]:
        key, data = inputs.input_for(self.corpus, self.filing_id, self.version, budget, self.counter)
        return key, data.costs


@dataclass(frozen=True)
class RowChunks:
    """A row's candidate chunks, stored once in the run by the producer (rows over one filing
    share them); their input for a budget is kept beside them."""

    files: RunFiles
    key: str
    counter: TokenCounter
    home: str | None = None  # in the run's own store

    def texts(self) -> tuple[list[str], list[int] | None]:
        return json.loads(self.files.store.get(self.key)), None

    def shared(self, budget: int) -> tuple[str, list[int]]:
        key = f"{self.key.removesuffix('.json')}-{budget}.json"
        try:
            return key, get_model(self.files.store, key, chunks.ChunkInput).costs
        except KeyError:
            pass
        data = chunks.prepare("", self.texts()[0], self.counter, budget)
        self.files.put_input(key, data, if_absent=True)  # stored before the jobs that read it are enqueued
        return key, data.costs


def fan_out(rt: Runtime, job: ChunkJob, source: FilingChunks | RowChunks) -> int:
    """A chunk query's input, then its first-level segments; returns how many. Without a
    pre-filter the input is the chunks' shared one (made once per budget, for every question
    over them); after one it is the query's own, since the kept chunks depend on the question."""
    config, question = job.config, job.question or ""
    if config.prefilters:
        texts, counts = source.texts()
        key, data = _prefiltered_input(rt.store(job.results), job, question, texts, source.counter, rt.gateway, counts)
        costs, update = data.costs, {"input_key": key, "n_candidates": len(texts), "corpus": None}
    else:
        key, costs = source.shared(config.segment_tokens)
        update = {"input_key": key, "n_candidates": len(costs), "corpus": source.home}
    level = chunks.first_level(costs, config.top_n, config.segment_top_k, config.segment_budget)
    enqueue_level(job.model_copy(update=update), 0, level)
    return len(level.segments)


def _prefiltered_input(
    store: Store,
    job: Job,
    question: str,
    texts: list[str],
    counter: TokenCounter,
    gateway: Gateway | None,
    counts: list[int] | None = None,
) -> tuple[str, chunks.ChunkInput]:
    """The chunks the pre-filter keeps for this question, stored as the query's own input (before
    the jobs that read it are enqueued); a pre-filter on an API embedder is paid, so its calls are
    kept, each under a key of its own: a resumed run that embeds again adds, never replaces."""
    layout, config = RunLayout(job.run_id), job.config
    with recording() as calls:
        data = chunks.prepare(
            question,
            texts,
            counter,
            config.segment_tokens,
            config.prefilter_keep,
            dense_scorer(config.dense, gateway),
            counts=counts,
            share=config.prefilter_share,
        )
    if calls:
        Ledger(store, None).spent(job, calls, "pre-filter embeddings", f"prefilter-{job.job_id}-{uuid.uuid4().hex[:8]}")
    key = layout.input(job.query_id)
    RunFiles(store, job.run_id).put_input(key, data)
    return key, data


# -- small pieces ---------------------------------------------------------------------------------


def _common(job: QuestionJob) -> dict:
    fields = ("run_id", "results", "line", "source", "config")
    return {name: getattr(job, name) for name in fields}


def _record(job: QuestionJob, **fields) -> QuestionPlan:
    q = job.question
    return QuestionPlan(
        question_id=q.id,
        question=q.question,
        line=q.line,
        source=job.source,
        scope=q.scope.model_dump(mode="json"),
        qrels=[r.model_dump(mode="json", exclude_none=True) for r in q.qrels],
        answer=q.answer,
        **fields,
    )
