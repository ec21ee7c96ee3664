"""Which filings a backfill or a fetch takes: by form (matched exactly: ``10-K`` does not take
``10-K/A``), by CIK, and by the companies a question set's scopes name, matched as a scope is
matched (prism.runs.planning.CorpusView: CIK, whole name, ticker, then first words) against the
candidates' own company names and CIKs. One selection serves `prism ingest`'s archive filter and
`prism fetch`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from prism.corpus.companies import cik_number
from prism.corpus.view import CorpusView
from prism.ingest.models import FilingMeta


class Candidate(NamedTuple):
    """A filing as an index row or a header names it, before it is read."""

    key: str  # what the caller knows it by: an archive member, an index row's path
    form: str | None
    cik: str | None
    company: str | None


@dataclass(frozen=True)
class Selection:
    forms: frozenset[str] = frozenset()
    ciks: frozenset[int] = frozenset()
    companies: tuple[str, ...] = ()  # the scopes' companies of a question set

    @property
    def active(self) -> bool:
        return bool(self.forms or self.ciks or self.companies)

    @property
    def by_company(self) -> bool:
        return bool(self.ciks or self.companies)

    def taken(self, candidates: Iterable[Candidate]) -> set[str]:
        """The keys of the candidates it takes."""
        found = [c for c in candidates if not self.forms or (c.form or "").strip() in self.forms]
        if not self.by_company:
            return {c.key for c in found}
        keep = {c.key for c in found if (cik := cik_number(c.cik)) is not None and cik in self.ciks}
        if self.companies:
            view = CorpusView.of_filings(
                [(c.key, FilingMeta(company=c.company, cik=c.cik, source_uri=c.key)) for c in found]
            )
            keep |= {key for company in self.companies for key, _ in view.pool(company)}
        return keep

    def describe(self) -> str:
        parts = []
        if self.forms:
            parts.append("forms " + ", ".join(sorted(self.forms)))
        if self.ciks:
            parts.append(f"{len(self.ciks)} CIK(s)")
        if self.companies:
            parts.append(f"the companies of {len(self.companies)} scope(s)")
        return " and ".join(parts) or "everything"


def forms_of(text: str | None) -> frozenset[str]:
    """``--forms 10-K,10-Q,8-K``: the forms, as EDGAR writes them."""
    return frozenset(f.strip() for f in (text or "").split(",") if f.strip())


def ciks_of(values: Iterable[str]) -> frozenset[int]:
    """CIKs as numbers (leading zeros and "CIK" ignored); ValueError naming one that is none."""
    out = set()
    for value in values:
        if value.strip():
            number = cik_number(value)
            if number is None:
                raise ValueError(f"{value.strip()!r} is not a CIK")
            out.add(number)
    return frozenset(out)
