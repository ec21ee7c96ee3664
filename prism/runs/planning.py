"""Planning a question, pure: which filings of a corpus its scope names, the period it asks
about, and the filings it is ranked in, given its filing types' scores. The planning task on the
fleet, `prism estimate` and the tests all plan through here, so they plan alike.

A scope's company is matched in the corpus's company index (prism.corpus.companies).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from prism.corpus.comparable import comparable
from prism.corpus.periods import Choice, Period, best_of, kept_for, resolve_period, score_filings
from prism.corpus.view import CorpusView, Everything, Pool, digest
from prism.ingest.models import FilingMeta
from prism.models import RunConfig
from prism.options import CompareMode
from prism.runs.questions import Question

NO_FILING = "no filing in scope"


@dataclass(frozen=True)
class InScope:
    """A question's filings in scope and the period it asks about."""

    pool: Pool
    period: Period


def in_scope(question: Question, view: CorpusView) -> InScope:
    """The filings of the question's company (any, unscoped), and its period."""
    return InScope(view.pool(question.scope.company), resolve_period(question.question, question.scope.period))


class Chosen(NamedTuple):
    choices: list[Choice]  # the filings the question is ranked in, best first
    considered: list[Choice]  # the best of those in scope, scored, ranked or not
    error: str | None  # why there is none


CONSIDERED = 10  # filings of a scope a plan keeps with their scores (the viewer shows them)


def choose(
    question: Question,
    scoped: InScope,
    form_scores: Mapping[str, float],
    config: RunConfig,
    view: CorpusView,
    corpus: str,
) -> Chosen:
    """The filings the question is ranked in (best first), or why there is none."""
    top_f = config.filings_per_question
    keep = max(CONSIDERED, kept_for(top_f))
    considered = score_filings(scoped.period, form_scores, scoped.pool, question.scope.form_types, keep=keep)
    choices = best_of(considered, top_f)
    considered = considered[:CONSIDERED]
    error = None if choices else no_filing(question, scoped.period.label(), view, corpus)
    return Chosen(choices, considered, error)


def compare_mode(question: Question, config: RunConfig) -> CompareMode | None:
    """The earlier filing a question's filings are compared with: its own choice, else the run's."""
    if question.compare == "none":
        return None
    return question.compare or config.compare


@dataclass(frozen=True)
class Previous:
    """A chosen filing and the earlier one it is compared with (None: the company has none)."""

    filing: str
    previous: str | None
    version: str  # the earlier filing's latest version ("" for none)
    reason: str


def previous_filings(mode: CompareMode, view: CorpusView, pool: Pool, chosen: Sequence[str]) -> list[Previous]:
    """The earlier filing each chosen filing is compared with, from its company's filings: the
    scope's own, or for an unscoped question its company's, read by its CIK or name."""
    wanted = set(chosen)
    metas = {fid: meta for fid, meta in pool if fid in wanted}
    found = []
    for fid in chosen:
        meta = metas[fid]
        if isinstance(pool, Everything):
            named = meta.cik or meta.company
            filings: Iterable[tuple[str, FilingMeta]] = view.scope(named) if named else ()
        else:
            filings = pool
        choice = comparable(mode, fid, meta, filings)
        version = view.versions.get(choice.filing_id, "") if choice.filing_id else ""
        found.append(Previous(fid, choice.filing_id, version, choice.reason))
    return found


def no_filing(question: Question, period: str, view: CorpusView, corpus: str) -> str:
    scope = question.scope
    what = [f"company {scope.company!r}" if scope.company else "any company"]
    if scope.form_types:
        what.append(f"form types {', '.join(scope.form_types)}")
    if period != "latest":
        what.append(f"period {period}")
    hint = view.hint(scope.company) if scope.company else ""
    return f"{NO_FILING}: the corpus {corpus} holds no filing of {' and '.join(what)}{hint}"


def pair_id(question_id: str, filing_id: str) -> str:
    return f"{question_id}@{filing_id}"


def pair_job_id(question: str, filing_id: str, version: str, config: RunConfig) -> str:
    """Same question, same filing version, same config: same id (reused at $0 by later runs)."""
    return digest(["chunks", question, filing_id, version, config.fingerprint()])


def question_job_id(question: Question, config: RunConfig) -> str:
    """Same question and scope, same config and filings per question: same id (a question's own
    compare, where it sets one, is in it; an id made before there was one stays)."""
    body = ["question", question.question, question.scope.model_dump(mode="json"), config.plan_fingerprint()]
    return digest([*body, question.compare] if question.compare else body)
