"""Planning a question, pure: which filings of a corpus its scope names, the period it asks
about, and the filings it is ranked in, given its filing types' scores. The planning task on the
fleet, `prism estimate` and the tests all plan through here, so they plan alike.

A scope's company is matched in the corpus's company index (prism.companies).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from prism.companies import CompanyIndex, company_of, index_row
from prism.comparable import comparable
from prism.ingest.models import FilingMeta
from prism.models import RunConfig
from prism.options import CompareMode
from prism.periods import Choice, Period, best_of, kept_for, resolve_period, score_filings
from prism.questions import Question

NO_FILING = "no filing in scope"

Filings = list[tuple[str, FilingMeta]]
# The filings of some catalogue companies (company_of values), each with its latest version.
Versioned = tuple[str, FilingMeta, str]
Loader = Callable[[Sequence[str]], list[Versioned]]
KEPT_SCOPES = 256  # the companies' filings a view keeps: the last scopes it planned


class Everything:
    """An unscoped question's pool: every filing of the corpus, read anew each time it is
    iterated (a partition at a time, from the catalogue) and never held whole."""

    def __init__(self, stream: Callable[[], Iterable[Versioned]]) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[tuple[str, FilingMeta]]:
        return ((fid, meta) for fid, meta, _ in self.stream())

    def __bool__(self) -> bool:
        return any(True for _ in self.stream())

    def versions(self, ids: Collection[str] | None = None) -> Iterator[tuple[str, str]]:
        """(filing id, latest version) of every filing, or of those given."""
        return ((fid, v) for fid, _, v in self.stream() if ids is None or fid in ids)


Pool = Filings | Everything  # a question's filings in scope


class CorpusView:
    """What planning reads of a corpus: its company index, whole (one entry per company name and
    ticker), and the filings of the companies a scope resolves to, loaded when asked (the last
    KEPT_SCOPES kept). An unscoped question reads every filing through ``everything``."""

    def __init__(
        self, index: CompanyIndex, load: Loader, everything: Callable[[], Iterable[Versioned]] = lambda: ()
    ) -> None:
        self.index, self.load, self.all = index, load, everything
        self.versions: dict[str, str] = {}
        self.kept: OrderedDict[tuple[str, ...], Filings] = OrderedDict()

    @classmethod
    def of_filings(cls, everything: Filings, versions: Mapping[str, str] | None = None) -> CorpusView:
        """A view of filings held in memory (an archive's listing, tests)."""
        versions = dict(versions or {})
        index = CompanyIndex.of_rows(index_row(m) for _, m in everything)
        by_company: dict[str, Filings] = {}
        for fid, meta in everything:
            by_company.setdefault(company_of(meta), []).append((fid, meta))

        def load(companies: Sequence[str]) -> list[Versioned]:
            return [(f, m, versions.get(f, "")) for c in companies for f, m in by_company.get(c, [])]

        return cls(index, load, lambda: [(f, m, versions.get(f, "")) for f, m in everything])

    def pool(self, company: str | None) -> Pool:
        if not company:
            return Everything(self.all)
        return self.scope(company)

    def scope(self, company: str) -> Filings:
        """The filings of the companies a scope names (kept for the next question about them)."""
        values = self.catalogued(company)
        if not values:
            return []
        if values not in self.kept:
            loaded = self.load(values)
            self.versions.update((fid, version) for fid, _, version in loaded)
            self.kept[values] = sorted(((fid, meta) for fid, meta, _ in loaded), key=lambda f: f[0])
            while len(self.kept) > KEPT_SCOPES:
                self.kept.popitem(last=False)
        self.kept.move_to_end(values)
        return self.kept[values]

    def catalogued(self, company: str) -> tuple[str, ...]:
        """The catalogue's company values a scope's company resolves to (none for first words
        that fit several companies: none is guessed)."""
        found, outright = self.index.match(company)
        if len(found) > 1 and not outright:
            return ()
        return self.index.values(found)

    def hint(self, company: str) -> str:
        """What a no-filing error adds about a scope's company: the companies its words fit when
        they fit several, the closest names when it names none; nothing when it names one."""
        found, outright = self.index.match(company)
        if len(found) > 1 and not outright:
            return f"; {company!r} could be any of: {', '.join(self.index.named(found))}"
        if found:
            return ""
        close = self.index.closest(company)
        return f"; closest companies in the corpus: {', '.join(close)}" if close else ""

    def pool_digest(self, pool: Pool) -> str:
        """The filings of a scope at their versions: unchanged while none is added, changed or
        removed (every filing's, streamed, for an unscoped question)."""
        if isinstance(pool, Everything):
            hashed = hashlib.sha256()
            for fid, version in pool.versions():  # in the catalogue's order, the same each time
                hashed.update(f"{fid}\t{version}\n".encode())
            return hashed.hexdigest()[:24]
        return digest(sorted((fid, self.versions[fid]) for fid, _ in pool))

    def versions_of(self, pool: Pool, ids: Collection[str]) -> dict[str, str]:
        """The latest versions of some filings of a pool."""
        if isinstance(pool, Everything):
            return dict(pool.versions(set(ids)))
        return {fid: self.versions[fid] for fid in ids}


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


def digest(value: object) -> str:
    """A short content hash of a JSON value."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()[:24]
