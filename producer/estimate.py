"""`prism estimate`: what a run would cost before any call, for a benchmark rows file or for a
question set over a corpus (`--questions Q --corpus C`); and the same pricing of the plans a
question-set run made, for its report's estimate beside what it spent.

A question set is planned here through prism.runs.planning, as the fleet's planning task plans it
(the scope's company, the period, the filings `--filings` takes), but without Celery, without an
LLM call and without writing anything. The filing types are scored by the document prior: where
an LLM ranks them in the run, its order is not known before its call, so the filing it leads to
may differ where the period does not settle the choice. Each chosen (question, filing) pair is
priced from the token counts the corpus stores for that filing version: no filing is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from prism.corpus.periods import Choice
from prism.corpus.view import CorpusView
from prism.datasets import InputFileError, RowError, RowWarning, read_input
from prism.models import Query, RunConfig, Stage
from prism.ranking.prior import DocPrior
from prism.ranking.rankers import asks_llm
from prism.runs.estimate import Estimate
from prism.runs.planning import choose, compare_mode, in_scope, previous_filings
from prism.runs.questions import Question, read_questions
from producer.inputs import invalid_failure, question_items
from producer.spec import RunError, open_corpus
from workers.corpus import Corpus
from workers.inputs import price
from workers.priors import PACKAGED, read_prior
from workers.settings import Settings


class QuestionSetEstimate(BaseModel):
    """A question set's estimate: what was read and planned, and the priced calls."""

    questions: int  # questions read and planned (at most --limit)
    bad_lines: list[str] = []  # as a run names them: "Q: line 3, field 'scope.period': ..."
    no_filing: list[str] = []  # "<id> (line 4): no filing in scope: ..."
    pairs: int = 0  # (question, filing) pairs chosen: the chunk queries
    earlier_pairs: int = 0  # of them, pairs of an earlier filing ranked to be compared with (--compare)
    document_calls: int = 0  # questions whose filing types an LLM ranks
    estimate: Estimate


@dataclass(frozen=True)
class PlannedQuestion:
    """One question as planning would leave it: its period and filings, or why it has none."""

    question: Question
    period: str
    filings: list[Choice]
    documents_by_llm: bool  # its filing types are ranked by an LLM call (priced)
    error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)  # its filings' latest versions
    earlier: dict[str, str] = field(default_factory=dict)  # earlier filings ranked to be compared with, by version


def planned_by_prior(
    question: Question, view: CorpusView, prior: DocPrior, config: RunConfig, corpus: str
) -> PlannedQuestion:
    """The filings the planning task would choose for a question: the same two steps of
    prism.runs.planning (in_scope, choose), its filing types scored by the prior where the task may
    ask an LLM. As there, a scope with no filing pays for no document ranking."""
    scoped = in_scope(question, view)
    scores = prior.form_scores(question.question) if scoped.pool else {}
    choices, _, error = choose(question, scoped, scores, config, view, corpus)
    by_llm = bool(scoped.pool) and asks_llm(config, prior, question.question)
    chosen = [c.filing_id for c in choices]
    versions = view.versions_of(scoped.pool, chosen)
    mode, earlier = compare_mode(question, config), {}
    if mode is not None and choices:
        found = previous_filings(mode, view, scoped.pool, chosen)
        earlier = {p.previous: p.version for p in found if p.previous is not None and p.previous not in versions}
    return PlannedQuestion(question, scoped.period.label(), choices, by_llm, error, versions, earlier)


def plan_questions(
    questions: str, corpus: Corpus, settings: Settings, config: RunConfig
) -> tuple[list[PlannedQuestion], list[str]]:
    """Every question of a set planned over the corpus (at most ``config.limit``), and its bad lines."""
    view, prior = corpus.view(), read_prior(settings.doc_prior or PACKAGED, settings)
    planned: list[PlannedQuestion] = []
    bad: list[str] = []
    for item in question_items(questions, settings):
        if isinstance(item, InputFileError | RowError):
            bad.append(invalid_failure("estimate", questions, item).error)
            continue
        planned.append(planned_by_prior(item, view, prior, config, corpus.store.uri))
        if config.limit and len(planned) >= config.limit:
            break
    return planned, bad


def estimate_questions(
    questions: str,
    corpus_uri: str,
    settings: Settings,
    config: RunConfig,
    expected_output: dict[Stage, int],
    reasoning_share: float = 0.0,
) -> QuestionSetEstimate:
    """A question set over a corpus, planned and priced; nothing is written and no LLM is called."""
    corpus = open_corpus(corpus_uri, settings)
    planned, bad = plan_questions(questions, corpus, settings, config)
    if not planned:
        raise RunError(_nothing_read(questions, bad, rows_hint=True))
    pairs = [(p.question.question, c.filing_id, p.versions[c.filing_id]) for p in planned for c in p.filings]
    earlier = [(p.question.question, fid, version) for p in planned for fid, version in p.earlier.items()]
    documents = [p.question.question for p in planned if p.documents_by_llm]
    result = price(documents, pairs + earlier, corpus, settings, config, expected_output, reasoning_share)
    return QuestionSetEstimate(
        questions=len(planned),
        bad_lines=bad,
        no_filing=[f"{p.question.id} (line {p.question.line}): {p.error}" for p in planned if p.error],
        pairs=len(pairs) + len(earlier),
        earlier_pairs=len(earlier),
        document_calls=len(documents),
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
