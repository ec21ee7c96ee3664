"""`prism estimate`: what a run would cost before any call, for a benchmark rows file or for a
question set over a corpus (`--questions Q --corpus C`).

A question set is planned here as the fleet's planning task plans it (tasks/planning.py): the
scope's company through its CorpusView, the period by resolve_period, the filing types' scores,
the filings by choose_filings, the top `--filings` of them; but without Celery, without an LLM
call and without writing anything. The filing types are scored by the document prior: where an
LLM ranks them in the run, its order is not known before its call, so the filing it leads to may
differ where the period does not settle the choice. Each chosen (question, filing) pair is the
chunk query the fleet ranks: the filing's chunk input kept in the corpus for the segment budget
(made in memory, not stored, where the corpus has none for it) with the question, priced by
prism.estimate with the document call of each question whose filing types an LLM ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from prism.datasets import InputFileError, RowError, RowWarning, read_input
from prism.estimate import Estimate, estimate
from prism.ingest import Chunking
from prism.models import FILING_TYPES, Query, RunConfig, Stage
from prism.periods import Choice, choose_filings, resolve_period
from prism.pricing import PriceTable
from prism.prior import DocPrior
from prism.questions import read_questions
from prism.rankers import asks_llm
from prism.segmenting import TokenCounter
from prism.strategies.chunks import ChunkInput
from producer.plan import invalid_failure
from producer.questions import question_items, question_job
from producer.spec import RunError, RunSpec
from tasks.planning import CorpusView, no_filing
from workers.corpus import Corpus
from workers.messages import QuestionJob
from workers.priors import PACKAGED, read_prior
from workers.settings import Settings
from workers.store import open_store


class QuestionSetEstimate(BaseModel):
    """A question set's estimate: what was read and planned, and the priced calls."""

    questions: int  # questions read and planned (at most --limit)
    bad_lines: list[str] = []  # as a run names them: "Q: line 3, field 'scope.period': ..."
    no_filing: list[str] = []  # "<id> (line 4): no filing in scope: ..."
    pairs: int = 0  # (question, filing) pairs chosen: the chunk queries
    document_calls: int = 0  # questions whose filing types an LLM ranks
    estimate: Estimate


@dataclass(frozen=True)
class PlannedQuestion:
    """One question as planning would leave it: its filings, or why it has none."""

    job: QuestionJob
    period: str
    filings: list[Choice]
    documents_by_llm: bool  # its filing types are ranked by an LLM call (priced)
    error: str | None = None


def plan_question(job: QuestionJob, view: CorpusView, prior: DocPrior) -> PlannedQuestion:
    """The filings the planning task would choose for a question, its filing types scored by the
    prior. As there, a scope with no filing pays for no document ranking."""
    q = job.question
    pool = view.pool(q.scope.company)
    period = resolve_period(q.question, q.scope.period)
    choices: list[Choice] = []
    by_llm = False
    if pool:
        by_llm = asks_llm(job.config, prior, q.question)
        choices = choose_filings(
            period, prior.form_scores(q.question), pool, job.filings_per_question, q.scope.form_types
        )
    error = None if choices else no_filing(job, period.label(), view)
    return PlannedQuestion(job, period.label(), choices, by_llm, error)


def priced_queries(
    planned: Sequence[PlannedQuestion],
    corpus: Corpus,
    versions: dict[str, str],
    config: RunConfig,
    counter: TokenCounter,
) -> Iterator[Query | ChunkInput]:
    """What the run would send, as prism.estimate prices it: each LLM document ranking, then
    each pair's chunk query, a filing read once for all the questions that chose it."""
    questions: dict[str, list[str]] = {}  # filing -> the questions that chose it, in order
    for p in planned:
        q = p.job.question
        if p.documents_by_llm:
            yield Query(id=q.id, task="documents", question=q.question, candidates=list(FILING_TYPES), line=q.line)
        for choice in p.filings:
            questions.setdefault(choice.filing_id, []).append(q.question)
    for fid, asked in questions.items():
        if not config.uses_llm("chunks"):  # a $0 ranker: one segment a pair, nothing to read
            yield from (ChunkInput(question=question, chunks=[], costs=[]) for question in asked)
            continue
        filing = corpus.get_filing(fid, versions[fid])
        if config.prefilters:  # the kept chunks depend on the question: prepared per pair
            texts = [c.text for c in filing.chunks]
            yield from (Query(id=fid, task="chunks", question=question, candidates=texts) for question in asked)
            continue
        shared = Corpus.as_chunk_input(filing, corpus.read_input(filing, config.segment_tokens, counter))
        yield from (shared.model_copy(update={"question": question}) for question in asked)


def estimate_questions(
    questions: str,
    corpus_uri: str,
    settings: Settings,
    config: RunConfig,
    expected_output: dict[Stage, int],
    reasoning_share: float = 0.0,
    limit: int | None = None,
) -> QuestionSetEstimate:
    """A question set over a corpus, planned and priced; nothing is written and no LLM is called."""
    corpus = Corpus(open_store(corpus_uri, settings))
    manifest = corpus.manifest()
    if not manifest.filings:
        raise RunError(f"--corpus {corpus_uri}: no filings there; ingest some first (prism ingest FILES --corpus ...)")
    view = CorpusView.of(manifest)
    prior = read_prior(settings.doc_prior or PACKAGED, settings)
    spec = RunSpec(run_id="estimate", input=questions, results=settings.results, config=config, corpus=corpus.store.uri)
    at = manifest.written_at.isoformat() if manifest.written_at else ""
    planned: list[PlannedQuestion] = []
    bad: list[str] = []
    for item in question_items(questions, settings):
        if isinstance(item, InputFileError | RowError):
            bad.append(invalid_failure(spec.run_id, questions, item).error)
            continue
        planned.append(plan_question(question_job(spec, item, at, settings.filings_per_question), view, prior))
        if limit and len(planned) >= limit:
            break
    if not planned:
        raise RunError(_nothing_read(questions, bad, rows_hint=True))
    counter = TokenCounter(Chunking().encoding)
    queries = priced_queries(planned, corpus, view.versions, config, counter)
    result = estimate(
        queries,
        config,
        PriceTable.load(settings.prices_file),
        expected_output,
        settings.prompt_cache_key,
        counter,
        reasoning_share,
    )
    return QuestionSetEstimate(
        questions=len(planned),
        bad_lines=bad,
        no_filing=[f"{p.job.question.id} (line {p.job.question.line}): {p.error}" for p in planned if p.error],
        pairs=sum(len(p.filings) for p in planned),
        document_calls=sum(p.documents_by_llm for p in planned),
        estimate=result,
    )


def read_rows(path: str, limit: int | None = None) -> tuple[list[Query], list[str]]:
    """The queries of a local rows file and its bad lines, named as a run names them. A file
    whose lines are questions (no candidates), or of which no row can be read, is an error: an
    estimate of nothing is never printed as USD 0."""
    queries: list[Query] = []
    bad: list[str] = []
    try:
        for item in read_input(path, lambda: open(path, "rb")):
            if isinstance(item, RowError):
                bad.append(invalid_failure("estimate", path, item).error)
            elif isinstance(item, Query):
                queries.append(item)
                if limit and len(queries) >= limit:
                    break
    except InputFileError as err:
        bad.append(invalid_failure("estimate", path, err).error)
    if queries:
        return queries, bad
    found = _questions_in(path)
    if found:
        raise RunError(
            f"{path} is a question set ({found} questions, no candidates to rank): "
            f"price it over its corpus with `prism estimate --questions {path} --corpus CORPUS`"
        )
    raise RunError(_nothing_read(path, bad))


def _questions_in(path: str) -> int:
    """How many lines of a file read as questions (0 when it cannot be read)."""
    try:
        with open(path, "rb") as stream:
            return sum(1 for item in read_questions(stream, path) if not isinstance(item, RowError))
    except (OSError, InputFileError):
        return 0


def _nothing_read(source: str, bad: list[str], rows_hint: bool = False) -> str:
    if not bad:
        return f"{source}: no line to read (the file is empty)"
    first = bad[0].removeprefix(f"{source}: ")
    message = f"{source}: no line could be read ({len(bad)} bad line{'' if len(bad) == 1 else 's'}; the first: {first})"
    if rows_hint and Path(source).is_file() and _rows_in(source):
        message += f"; its lines are benchmark rows: price them with `prism estimate {source}`"
    return message


def _rows_in(path: str) -> bool:
    """Whether the first line of a local file reads as a benchmark row."""
    try:
        first = next((i for i in read_input(path, lambda: open(path, "rb")) if not isinstance(i, RowWarning)), None)
    except InputFileError:
        return False
    return isinstance(first, Query)
