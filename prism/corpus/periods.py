"""The period a question asks about, and the filings of a company that fit it best.

:func:`resolve_period` reads the period from a question ("FY2018", "fiscal 2019", "Q2 2023",
"second quarter of FY2023", "as of 2022", "in 2017") or from the scope's own ("latest", "2023Q2");
a question naming no year asks for the latest filing. When several years are named ("FY2021 vs
FY2022") the latest is the one asked for: its filing reports the earlier years as comparatives.
:func:`choose_filings` ranks a company's filings by how well their period fits, then by the
filing-type scores of document ranking, then by recency.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime

from prism.ingest.models import FilingMeta
from prism.options import FilingsPerQuestion

_WORDS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4}
_YEAR = r"((?:19|20)\d{2})"
_FY = r"(?:FY\s*'?|fiscal\s+(?:year\s+)?)?"
# (pattern, which group holds the quarter, which the year); a two-digit year is 20xx.
_QUARTER_PATTERNS = (
    (re.compile(rf"\bQ([1-4])\s*(?:of\s*)?{_FY}{_YEAR}(?!\d)", re.I), 1, 2),  # Q2 2023, Q2 of FY2023, Q22023
    (re.compile(rf"(?<!\d){_YEAR}\s*-?\s*Q([1-4])\b", re.I), 2, 1),  # 2023Q2, FY2023Q1
    (re.compile(r"\bQ([1-4])\s*(?:FY\s*|')(\d{2})\b", re.I), 1, 2),  # Q2 FY23, Q2'23
    (
        re.compile(
            rf"\b(first|second|third|fourth|1st|2nd|3rd|4th)\s+(?:fiscal\s+)?quarter\s+(?:of\s+)?{_FY}{_YEAR}\b", re.I
        ),
        1,
        2,
    ),
)
# Years marked as fiscal or as the point in time asked about win over bare years ("as of FY2021, ... in 2024").
_MARKED_YEAR = re.compile(rf"(?:\bFY\s*'?|\bfiscal\s+(?:year\s+)?|\bas\s+of\s+(?:FY\s*)?)(?:{_YEAR}|(\d{{2}})\b)", re.I)
_DATE = re.compile(
    r"\b(January|February|March|April|May|June|July|August|September|October|November|December)\s+(?:(\d{1,2}),?\s+)?((?:19|20)\d{2})\b"
)
_NAME_DATE = re.compile(r"(?<!\d)((?:19|20)\d{2})-(\d{2})-(\d{2})(?!\d)")
_FISCAL_SHORT = re.compile(r"\bFY\s*'?(\d{2})\b", re.I)  # FY23
_ANY_YEAR = re.compile(rf"(?<![\d$.,]){_YEAR}(?![\d%]|\s*(?:million|billion)\b)")
_LATEST = re.compile(r"^(latest|newest|most recent|current)$", re.I)
_SCOPE = re.compile(r"^(?:FY\s*(\d{4})|(\d{4})\s*-?\s*Q([1-4])|Q([1-4])\s*-?\s*(?:FY\s*)?(\d{4})|(\d{4}))$", re.I)


PERIODIC = frozenset({"10-K", "10-Q", "20-F", "40-F"})  # reports filed within weeks of their period's end


class PeriodError(ValueError):
    """A period a scope gives that is none of the spellings read here."""


@dataclass(frozen=True)
class Period:
    year: int | None = None  # the fiscal year asked about; None: the latest filing
    quarter: int | None = None
    years: tuple[int, ...] = ()  # every year the question names, in order
    source: str = "question"  # "question", "scope" or "none" (nothing named: the latest)
    date: date | None = None  # a full date the question names: the filing dated just after it fits best
    outlook: bool = False  # asked what was expected of the year: the year before's filings made the forecast

    @property
    def latest(self) -> bool:
        return self.year is None

    def label(self) -> str:
        if self.year is None:
            return "latest"
        return f"{self.year}Q{self.quarter}" if self.quarter else f"FY{self.year}"


def parse_period(text: str) -> Period:
    """A scope's period: "latest", "FY2018", "2018", "2023Q2" or "Q2 2023"."""
    value = text.strip()
    if _LATEST.match(value):
        return Period(source="scope")
    match = _SCOPE.match(value)
    if not match:
        raise PeriodError(f"{text!r} is not 'latest', FY2018, 2018, 2023Q2 or Q2 2023")
    fy, qy, q, q2, qy2, year = match.groups()
    if fy or year:
        y = int(fy or year)
        return Period(year=y, years=(y,), source="scope")
    y = int(qy or qy2)
    return Period(year=y, quarter=int(q or q2), years=(y,), source="scope")


# A question about what was expected of a year ("forecasting for FY2023", "expected to accelerate in FY2023").
_OUTLOOK = re.compile(r"\b(expect(?:s|ed|ing)?|forecast\w*|outlook|guidance|project(?:ed|ions?)|anticipat\w*)\b", re.I)


def resolve_period(question: str, scope_period: str | None = None) -> Period:
    """The scope's period when it gives one, else the one the question names, else the latest."""
    if scope_period is not None:
        return parse_period(scope_period)
    quarter: tuple[int, int] | None = None  # (year, quarter)
    for pattern, q_group, y_group in _QUARTER_PATTERNS:
        for m in pattern.finditer(question):
            q_text, y_text = m.group(q_group), m.group(y_group)
            q = int(q_text) if q_text.isdigit() else _WORDS[q_text.lower()]
            y = int(y_text) if len(y_text) == 4 else 2000 + int(y_text)
            if quarter is None or y > quarter[0]:
                quarter = (y, q)
    years = [int(m.group(1)) for m in _ANY_YEAR.finditer(question)]
    years += [2000 + int(m.group(1)) for m in _FISCAL_SHORT.finditer(question)]
    years = [y for y in years if 1990 <= y <= 2100]
    marked = [int(a) if a else 2000 + int(b) for a, b in _MARKED_YEAR.findall(question)]
    if not years and quarter is None:
        return Period(source="none", date=_question_date(question))
    latest = max((marked or years) + ([quarter[0]] if quarter else []))
    q_of_latest = quarter[1] if quarter and quarter[0] == latest else None
    return Period(
        year=latest,
        quarter=q_of_latest,
        years=tuple(dict.fromkeys(years)),
        date=_question_date(question),
        outlook=q_of_latest is None and bool(_OUTLOOK.search(question)),
    )


def _question_date(question: str) -> date | None:
    """The last date the question names ("as of May 26, 2023"; "in September 2024" is the 1st):
    an event a current report tells of, or one just after a period that its report covers."""
    found = None
    for month, day, year in _DATE.findall(question):
        try:
            found = datetime.strptime(f"{month} {day or 1} {year}", "%B %d %Y").date()
        except ValueError:
            continue
    return found


def filing_date(meta: FilingMeta) -> date | None:
    """The period's end, else a date in the filing's name ("..._8K_dated-2022-05-20")."""
    if meta.period_end is not None:
        return meta.period_end
    match = _NAME_DATE.search(meta.name or "")
    if match:
        try:
            return date(*map(int, match.groups()))
        except ValueError:
            return None
    return None


def filing_year(meta: FilingMeta) -> int | None:
    if meta.fiscal_year is not None:
        return meta.fiscal_year
    return meta.period_end.year if meta.period_end else None


def period_fit(period: Period, meta: FilingMeta) -> float:
    """1 for the filing of the period asked; less for one that also reports it (the next year's,
    a quarterly filing of the year asked); 0 for one of another period. Latest: 0 (recency decides)."""
    year = filing_year(meta)
    dated = filing_date(meta)
    if period.date is not None and dated is not None:
        days = (dated - period.date).days
        if 0 <= days <= 45:
            return 1.5 - days / 100  # a current report filed within weeks of the event
        if -45 <= days < 0 and meta.form_type in PERIODIC:
            # a date just after a quarter or year ends is on its report: shares outstanding on the cover, subsequent events
            return 1.2 + days / 100
    if period.year is None or year is None:
        return 0.0
    if period.quarter is not None:
        if year == period.year and meta.fiscal_quarter == period.quarter:
            return 1.0
        if year == period.year:
            return 0.6 if meta.fiscal_quarter is None and period.quarter == 4 else 0.4
        return 0.0
    if year == period.year:
        # a fourth quarter's release reports the whole year too
        return 1.0 if meta.fiscal_quarter in (None, 4) or meta.form_type == "10-K" else 0.7
    if period.outlook and year == period.year - 1:
        return 1.0  # the forecast for a year is in the filings of the year before
    if year == period.year + 1:
        return 0.3  # next year's annual filing reports this year as the comparative
    if year == period.year + 2 and meta.form_type == "10-K":
        return 0.2  # an annual income statement covers three years
    return 0.0


def _recency(meta: FilingMeta) -> tuple[int, int, date]:
    # A quarter's filing comes after the annual filing of the year before; an annual report after the year's quarters.
    return (filing_year(meta) or 0, meta.fiscal_quarter or 5, filing_date(meta) or date.min)


# --filings auto: a question is searched in the next filings too while their score is this close
# to the best's: a form type that ranks level with the best (an event question's 8-K beside the
# 10-K), or the same type a few filings back when no period is named. A period's fit weighs 2, a
# form type's score 1 and recency 0.5 at most, so a filing for another period never comes close.
AUTO_MARGIN = 0.25
AUTO_MAX = 3


@dataclass(frozen=True)
class Choice:
    """A filing in a question's scope, scored: 2 x its period fit + its form's score + recency."""

    filing_id: str
    score: float
    period_fit: float
    form_score: float
    reason: str
    recency: float = 0.0  # its part of the score


def choose_filings(
    period: Period,
    form_scores: Mapping[str, float],
    filings: Iterable[tuple[str, FilingMeta]],
    top_f: FilingsPerQuestion = 1,
    form_types: Sequence[str] = (),
) -> list[Choice]:
    """The best ``top_f`` filings of score_filings; ``"auto"``: the best and the next ones (up to
    AUTO_MAX) scored within AUTO_MARGIN of it."""
    return best_of(score_filings(period, form_scores, filings, form_types, keep=kept_for(top_f)), top_f)


def kept_for(top_f: FilingsPerQuestion) -> int:
    """How many of the best scored filings best_of may take."""
    return AUTO_MAX if top_f == "auto" else top_f


def best_of(scored: Sequence[Choice], top_f: FilingsPerQuestion) -> list[Choice]:
    """The chosen of filings scored best first (score_filings)."""
    if not scored:
        return []
    if top_f == "auto":
        return [c for c in scored[:AUTO_MAX] if c.score >= scored[0].score - AUTO_MARGIN]
    return list(scored[:top_f])


def score_filings(
    period: Period,
    form_scores: Mapping[str, float],
    filings: Iterable[tuple[str, FilingMeta]],
    form_types: Sequence[str] = (),
    keep: int | None = None,
) -> list[Choice]:
    """The filings in scope, best first (the best ``keep`` of them): by period fit, then the
    filing type's score from document ranking (scaled to 0..1 over the types), then recency.
    ``form_types`` restricts the types; a named period leaves out filings that do not report it
    (none left: an empty list). ``filings`` is read twice and never held: an unscoped question's
    pool is the whole catalogue, streamed (recency ranks by a count of each filing date)."""

    def fits(meta: FilingMeta) -> bool:
        wanted = not form_types or meta.form_type in form_types
        return wanted and (period.year is None or period_fit(period, meta) > 0)

    dates = Counter(_recency(meta) for _, meta in filings if fits(meta))
    if not dates:
        return []
    last_of, seen = {}, 0  # a recency's rank: the last place it takes in the pool's order
    for when in sorted(dates):
        seen += dates[when]
        last_of[when] = seen - 1
    values = list(form_scores.values()) or [0.0]
    low, high = min(values), max(values)

    def scored(fid: str, meta: FilingMeta) -> Choice:
        raw = form_scores.get(meta.form_type or "", low)
        fit, kind = period_fit(period, meta), (raw - low) / (high - low) if high > low else 0.0
        recency = (0.5 if period.latest else 0.01) * last_of[_recency(meta)] / max(seen - 1, 1)
        score = 2.0 * fit + kind + recency
        reason = f"period {period.label()} fit {fit:.1f}, {meta.form_type or 'unknown form'} score {kind:.2f}"
        return Choice(fid, round(score, 4), fit, round(kind, 4), reason, round(recency, 4))

    choices = (scored(fid, meta) for fid, meta in filings if fits(meta))
    return heapq.nsmallest(keep, choices, key=_best_first) if keep is not None else sorted(choices, key=_best_first)


def _best_first(choice: Choice) -> tuple[float, str]:
    return -choice.score, choice.filing_id
