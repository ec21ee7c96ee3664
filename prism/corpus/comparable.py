"""The earlier filing a company's filing is compared with, pure: chosen from the company's filings
by form and fiscal period, or by date where a filing gives no fiscal period.

``previous``: a 10-Q's quarter before (a first quarter's: the annual report of the fiscal year
before), an annual report's year before, any other form's filing of the same form just before it.
``year_ago``: the same period a year before (the same quarter's 10-Q, the annual report before).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

from prism.corpus.companies import cik_number, company_key
from prism.corpus.periods import filing_year
from prism.ingest.models import FilingMeta
from prism.options import CompareMode

ANNUAL = frozenset({"10-K", "20-F", "40-F"})  # a fiscal year's report
QUARTERLY = "10-Q"
# How far from a year before a filing of a form with no fiscal period may be dated to stand for
# that period: a quarter's report comes within about six weeks of its end, an event any day.
YEAR_AGO_DAYS = 45

Filings = Iterable[tuple[str, FilingMeta]]


@dataclass(frozen=True)
class Comparable:
    """The filing a current one is compared with (None: the company has none), and how it was chosen."""

    filing_id: str | None
    reason: str


@dataclass(frozen=True)
class _Wanted:
    """The form and fiscal period of the filing looked for."""

    forms: frozenset[str]
    year: int
    quarter: int | None  # None: an annual report (a fourth quarter's, or no quarter given)

    def label(self) -> str:
        form = "10-K" if self.forms == ANNUAL else "/".join(sorted(self.forms))
        return f"{form} of {self.year}Q{self.quarter}" if self.quarter else f"{form} of FY{self.year}"

    def fits(self, meta: FilingMeta) -> bool:
        if meta.form_type not in self.forms or filing_year(meta) != self.year:
            return False
        if self.quarter is None:
            return meta.fiscal_quarter in (None, 4)
        return meta.fiscal_quarter == self.quarter


def comparable(mode: CompareMode, current_id: str, current: FilingMeta, filings: Filings) -> Comparable:
    """The filing of ``filings`` that ``current`` is compared with under ``mode``: another filing
    of the same company (by CIK, else by name), by fiscal period where ``current`` gives one, else
    by date (its period's end, else the day it was filed)."""
    own = [(fid, meta) for fid, meta in filings if fid != current_id and same_company(current, meta)]
    form = current.form_type
    if not form:
        return Comparable(None, "no previous filing: the filing's form is not known")
    wanted = _by_fiscal_period(mode, form, current)
    if wanted is not None:
        found = _latest([(fid, meta) for fid, meta in own if wanted.fits(meta)])
        if found is None:
            return Comparable(None, f"no previous filing: no {wanted.label()} of the company in the corpus")
        return Comparable(found, f"the {wanted.label()}")
    return _by_date(mode, form, current, own)


def same_company(a: FilingMeta, b: FilingMeta) -> bool:
    """The same CIK; where either has none, the same name (case, punctuation and legal form aside)."""
    ciks = cik_number(a.cik), cik_number(b.cik)
    if None not in ciks:
        return ciks[0] == ciks[1]
    return bool(a.company and b.company) and company_key(a.company or "") == company_key(b.company or "")


def _by_fiscal_period(mode: CompareMode, form: str, current: FilingMeta) -> _Wanted | None:
    """The form and fiscal period wanted, where the current filing's form is chosen by it and the
    filing gives its fiscal period; None: chosen by date."""
    year, quarter = filing_year(current), current.fiscal_quarter
    if year is None:
        return None
    if form in ANNUAL:
        return _Wanted(frozenset({form}), year - 1, None)
    if quarter is None:
        return None
    if mode == "year_ago":
        return _Wanted(frozenset({form}), year - 1, quarter)
    if form != QUARTERLY:
        return None  # another form's previous is the one filed just before it
    if quarter > 1:
        return _Wanted(frozenset({form}), year, quarter - 1)
    return _Wanted(ANNUAL, year - 1, None)  # the quarter before a first quarter is in the annual report


def _by_date(mode: CompareMode, form: str, current: FilingMeta, own: list[tuple[str, FilingMeta]]) -> Comparable:
    """The filing of the same form dated just before the current one (``previous``), or nearest
    to a year before it (``year_ago``), where the current filing gives no fiscal period."""
    when = _when(current)
    if when is None:
        return Comparable(None, "no previous filing: the filing gives no period or date")
    forms = ANNUAL | {QUARTERLY} if form == QUARTERLY else frozenset({form})
    dated = [(fid, meta, day) for fid, meta in own if meta.form_type in forms and (day := _when(meta)) is not None]
    if mode == "previous":
        before = [(day, meta.filed or date.min, fid) for fid, meta, day in dated if day < when]
        if not before:
            return Comparable(None, f"no previous filing: no {form} dated before {when.isoformat()} in the corpus")
        day, _, fid = max(before)
        return Comparable(fid, f"the {form} before, of {day.isoformat()}")
    target = when - timedelta(days=365)
    near = [(abs((day - target).days), fid, day) for fid, _, day in dated if abs((day - target).days) <= YEAR_AGO_DAYS]
    if not near:
        return Comparable(None, f"no previous filing: no {form} dated near {target.isoformat()} in the corpus")
    _, fid, day = min(near)
    return Comparable(fid, f"the {form} of a year before, of {day.isoformat()}")


def _when(meta: FilingMeta) -> date | None:
    return meta.period_end or meta.filed


def _latest(found: list[tuple[str, FilingMeta]]) -> str | None:
    """Of several filings for one period (an amendment beside the original), the last filed."""
    if not found:
        return None
    return max(found, key=lambda f: (f[1].filed or date.min, f[1].period_end or date.min, f[0]))[0]
