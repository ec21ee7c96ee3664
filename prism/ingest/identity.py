"""Who filed what, for which period: read from the filing itself, most trusted source first.

1. metadata given beside the filing (always wins);
2. the SEC header of a full submission (conformed name, CIK, submission type, period of report,
   filed as of date, fiscal year end), or the ``<TYPE>`` of its first document;
3. inline-XBRL ``dei:`` facts (registrant name, CIK, document type, period end date, fiscal year
   and period focus, trading symbol);
4. the cover page (the form line, the period or event date, the registrant's name line);
5. the file name last.

Each field records where it came from; those from the cover page or the file name are guesses.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

from prism.ingest.accession import ACCESSION, accession_of
from prism.ingest.models import GUESSED_ORIGINS, FilingMeta, MetaField, MetaOrigin
from prism.models import form_type

# Bumped when identity reads more from a filing (2: the accession number): each file is read once
# more, its filing found unchanged by content and its identity brought up to date, at no new version.
IDENTITY_FORMAT = 2
HEAD_CHARS = 8000  # the cover page: where the form, the period and the registrant are written
_MONTH_DATE = r"([A-Z][a-z]{2,8}\.?\s+\d{1,2}\s*,?\s*\d{4})"
_COVER_FORM = re.compile(r"^\s*FORM\s+([0-9A-Z]{1,4}-[0-9A-Z]{1,4}(?:/A)?|10-K\S*|10-Q\S*|DEF\s?14A)\s*$", re.M | re.I)
_COVER_PERIOD = re.compile(
    r"for (?:the )?(?:fiscal year|quarterly period|transition period|year) ended:?\s+" + _MONTH_DATE, re.I
)
_EVENT_AFTER = re.compile(r"\(Date of earliest event reported\)\s*:?\s*" + _MONTH_DATE, re.I)
_EVENT_BEFORE = re.compile(_MONTH_DATE + r"\s*\n?\s*\(?Date of Report\s*\(Date of earliest event reported\)", re.I)
# the line under the name: "(Exact name of registrant as specified in its charter)", "(Registrant Name)",
# "(Name of Issuer)" (an ownership report is about the issuer)
_REGISTRANT = re.compile(
    r"\(\s*(?:Exact name of (?:registrant|issuer|company)[^)]*|Registrant[\u2019']?s? Name|Name of (?:Registrant|Issuer))\s*\)",
    re.I,
)
# "2-26720 Louisville Gas and Electric Company 61-0264150": commission file number, name, IRS number
_COMBINED = re.compile(r"^\s*\d{1,3}-\d{3,6}\s+(.+?)\s+\d{2}-\d{7}\s*$", re.M)
_FILED_ON = re.compile(r"As filed with the Securities and Exchange Commission on\s+" + _MONTH_DATE, re.I)
_STATE = re.compile(r"\s*/[A-Z]{2,3}/?\s*$")  # EDGAR conformed names end in a state: "ACME CORP /DE/"
_RULE = re.compile(r"^[\s\-_=*.]*$")  # a line of dashes, underscores or nothing
_NAME_FORM = re.compile(r"(?<![a-z0-9])(10-?k|10-?q|8-?k|20-?f|def-?14a|earnings|annualreport)(?![a-z0-9])", re.I)
_NAME_YEAR = re.compile(r"(?<![0-9])((?:19|20)\d{2})(?:[-_ ]?q([1-4]))?(?![0-9])", re.I)
_QUARTER = re.compile(r"^Q([1-4])$", re.I)


def identify(
    given: FilingMeta,
    name: str,
    cover: str,
    header: dict[str, str] | None = None,
    facts: dict[str, str] | None = None,
) -> FilingMeta:
    """``given`` (the metadata file's record) with every field it lacks filled from the header,
    the dei facts, the cover page and the file name, in that order."""
    origins: dict[str, MetaOrigin] = {f: "metadata" for f in _FIELDS if getattr(given, f) is not None}
    origins.update(given.origins)
    found: dict[str, Any] = {}
    sources: list[tuple[MetaOrigin, dict[str, Any]]] = [
        ("sgml-header", _from_header(header or {})),
        ("path", {"accession": accession_of(given.source_uri)}),
        ("dei", _from_facts(facts or {})),
        ("cover", _from_cover(cover[:HEAD_CHARS])),
        ("file-name", _from_name(name)),
    ]
    for origin, fields in sources:
        if origin == "file-name" and found.get("period_end") and given.fiscal_year is None:
            # the period read from the filing says its fiscal year better than a year in its name
            found.setdefault("fiscal_year", _fiscal_year(found["period_end"], (header or {}).get("FISCAL YEAR END")))
            origins.setdefault("fiscal_year", origins["period_end"])
        for key, value in fields.items():
            if value is not None and getattr(given, key) is None and key not in found:
                found[key], origins[key] = value, origin
    guessed: list[MetaField] = list(given.guessed)
    guessed += [f for f in found if origins[f] in GUESSED_ORIGINS and f not in guessed]  # type: ignore[misc]
    return given.model_copy(update={**found, "origins": origins, "guessed": guessed})


_FIELDS = ("company", "form_type", "fiscal_year", "fiscal_quarter", "period_end", "cik", "ticker", "filed", "accession")


def _from_header(header: dict[str, str]) -> dict[str, Any]:
    form = header.get("CONFORMED SUBMISSION TYPE") or header.get("TYPE")
    return {
        "company": _clean_name(header.get("COMPANY CONFORMED NAME")),
        "cik": _cik(header.get("CENTRAL INDEX KEY")),
        "form_type": form_type(form) if form else None,
        "period_end": _compact_date(header.get("CONFORMED PERIOD OF REPORT")),
        "filed": _compact_date(header.get("FILED AS OF DATE")),
        "accession": _accession(header.get("ACCESSION NUMBER")),
    }


def _from_facts(facts: dict[str, str]) -> dict[str, Any]:
    year = facts.get("DocumentFiscalYearFocus", "")
    quarter = _QUARTER.match(facts.get("DocumentFiscalPeriodFocus", ""))
    return {
        "company": _clean_name(facts.get("EntityRegistrantName")),
        "cik": _cik(facts.get("EntityCentralIndexKey")),
        "form_type": form_type(facts["DocumentType"]) if facts.get("DocumentType") else None,
        "period_end": _any_date(facts.get("DocumentPeriodEndDate")),
        "fiscal_year": int(year) if year.isdigit() and 1900 <= int(year) <= 2200 else None,
        "fiscal_quarter": int(quarter.group(1)) if quarter else None,
        "ticker": (facts.get("TradingSymbol") or "").strip().upper() or None,
    }


def _from_cover(text: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if match := _COVER_FORM.search(text):
        found["form_type"] = form_type(" ".join(match.group(1).split()))
    for pattern in (_EVENT_AFTER, _EVENT_BEFORE, _COVER_PERIOD):  # an 8-K's period is its event date
        if (match := pattern.search(text)) and (end := _any_date(match.group(1))):
            found["period_end"] = end
            break
    if match := _REGISTRANT.search(text):
        lines = [line.strip() for line in text[: match.start()].split("\n")]
        found["company"] = next((_clean_name(line) for line in reversed(lines) if not _RULE.match(line)), None)
    if not found.get("company") and (match := _COMBINED.search(text)):
        found["company"] = _clean_name(match.group(1))
    if match := _FILED_ON.search(text):
        found["filed"] = _any_date(match.group(1))
    return found


def _from_name(name: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if match := _NAME_FORM.search(name):
        found["form_type"] = form_type(match.group(1))
    if match := _NAME_YEAR.search(name):
        found["fiscal_year"] = int(match.group(1))
        if match.group(2):
            found["fiscal_quarter"] = int(match.group(2))
        company = re.sub(r"[_\- ]+$", "", name[: match.start()])
        if form := _NAME_FORM.search(company):  # "acme-10k-2023": the form is not part of the name
            company = re.sub(r"[_\- ]+$", "", company[: form.start()])
        found["company"] = company.strip() or None
    return found


def _clean_name(value: str | None) -> str | None:
    if not value:
        return None
    name = _STATE.sub("", " ".join(value.split())).strip(" ,;:")
    return name if 1 < len(name) <= 160 and any(c.isalpha() for c in name) else None


def _cik(value: str | None) -> str | None:
    digits = (value or "").strip()
    return digits.zfill(10) if digits.isdigit() and 0 < len(digits) <= 10 else None


def _accession(value: str | None) -> str | None:
    found = ACCESSION.fullmatch((value or "").strip())
    return found.group(1) if found else None


def _compact_date(value: str | None) -> date | None:
    try:
        return datetime.strptime((value or "").strip(), "%Y%m%d").date()
    except ValueError:
        return None


def _any_date(value: str | None) -> date | None:
    """ "July 27, 2025", "Sept. 30, 2024", "2025-07-27"."""
    text = " ".join((value or "").replace(",", " ").replace(".", " ").split())
    text = re.sub(r"^Sept\b", "Sep", text)
    for fmt in ("%B %d %Y", "%b %d %Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def _fiscal_year(end: date, year_end: str | None) -> int:
    """Fiscal years are named by the year they end in: a period after the fiscal year end's month
    and day (``0125`` for NVIDIA) falls in the next calendar year's fiscal year."""
    if year_end and len(year_end) == 4 and year_end.isdigit():
        if (end.month, end.day) > (int(year_end[:2]), int(year_end[2:])):
            return end.year + 1
    return end.year
