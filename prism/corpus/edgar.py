"""EDGAR's own files and paths, pure: its index files (``full-index/YYYY/QTRn/form.idx``,
``master.idx``, ``company.idx``, ``daily-index/YYYY/QTRn/form.YYYYMMDD.idx``), the paths of a
day's and a quarter's indexes, and a filing's pages on EDGAR.

A form or company index is fixed-width after a dashed line, its columns named by the line above;
``master.idx`` is ``CIK|Company Name|Form Type|Date Filed|Filename``. The last column is a path
under ``Archives/``: ``edgar/data/CIK/ACCESSION.txt``."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import PurePosixPath
from typing import NamedTuple

from prism.ingest.accession import ACCESSION


class IndexRow(NamedTuple):
    form: str
    company: str
    cik: str  # as the index writes it, no leading zeros
    filed: date
    path: str  # under Archives/: edgar/data/CIK/ACCESSION.txt

    @property
    def accession(self) -> str | None:
        found = ACCESSION.findall(self.path)
        return found[-1] if found else None


class EdgarIndexError(ValueError):
    """An index file that cannot be read, said with its line."""


_COLUMNS = {"form type": "form", "company name": "company", "cik": "cik", "date filed": "filed"}


def parse_index(text: str, source: str = "index") -> list[IndexRow]:
    """The rows of an EDGAR index file (form, company or master)."""
    lines = text.splitlines()
    dashes = next((i for i, line in enumerate(lines) if line.startswith("-----")), None)
    if dashes is None or dashes == 0:
        raise EdgarIndexError(f"{source}: not an EDGAR index (no header and dashed line)")
    header = lines[dashes - 1]
    if "|" in header:
        return [_master_row(line, source, n) for n, line in enumerate(lines[dashes + 1 :], dashes + 2) if line.strip()]
    starts = _starts(header, source)
    return [
        _fixed_row(line, starts, source, n) for n, line in enumerate(lines[dashes + 1 :], dashes + 2) if line.strip()
    ]


def _starts(header: str, source: str) -> list[tuple[str, int]]:
    """Where each column starts, from the header line's names."""
    found = []
    lowered = header.lower()
    for name in ("form type", "company name", "cik", "date filed", "file name", "filename"):
        at = lowered.find(name)
        if at >= 0:
            found.append((name, at))
    names = {n for n, _ in found}
    if not {"form type", "company name", "cik", "date filed"} <= names or not names & {"file name", "filename"}:
        raise EdgarIndexError(f"{source}: the header names no Form Type, Company Name, CIK, Date Filed and File Name")
    return sorted(found, key=lambda f: f[1])


def _fixed_row(line: str, starts: list[tuple[str, int]], source: str, number: int) -> IndexRow:
    cells = {}
    for (name, at), following in zip(starts, [*starts[1:], ("", len(line) + 1)], strict=True):
        cells[_COLUMNS.get(name, "path")] = line[at : following[1]].strip() if following[0] else line[at:].strip()
    return _row(cells, source, number)


def _master_row(line: str, source: str, number: int) -> IndexRow:
    parts = [p.strip() for p in line.split("|")]
    if len(parts) != 5:
        raise EdgarIndexError(f"{source} line {number}: expected 5 fields separated by '|', got {len(parts)}")
    cik, company, form, filed, path = parts
    return _row({"form": form, "company": company, "cik": cik, "filed": filed, "path": path}, source, number)


def _row(cells: dict[str, str], source: str, number: int) -> IndexRow:
    filed = cells.get("filed", "")
    for fmt in ("%Y%m%d", "%Y-%m-%d"):
        try:
            day = datetime.strptime(filed, fmt).date()
            break
        except ValueError:
            continue
    else:
        raise EdgarIndexError(f"{source} line {number}, field 'Date Filed': {filed!r} is not a date")
    if not cells.get("path") or not cells.get("cik", "").isdigit():
        raise EdgarIndexError(f"{source} line {number}: no CIK or file name")
    return IndexRow(cells["form"], cells["company"], cells["cik"], day, cells["path"])


def quarter(day: date) -> int:
    return (day.month - 1) // 3 + 1


def daily_index(day: date) -> str:
    """The path, under the base URL, of a day's form index (a 404 there: a day without filings)."""
    return f"/Archives/edgar/daily-index/{day.year}/QTR{quarter(day)}/form.{day:%Y%m%d}.idx"


def full_index(year: int, qtr: int) -> str:
    return f"/Archives/edgar/full-index/{year}/QTR{qtr}/form.idx"


def quarters(since: date, until: date) -> list[tuple[int, int]]:
    """The (year, quarter) pairs the dates span, in order."""
    out: list[tuple[int, int]] = []
    day = date(since.year, 3 * (quarter(since) - 1) + 1, 1)
    while day <= until:
        out.append((day.year, quarter(day)))
        day = date(day.year + (day.month > 9), (day.month + 2) % 12 + 1, 1)
    return out


def days(since: date, until: date) -> list[date]:
    return [since + timedelta(days=n) for n in range((until - since).days + 1)]


def filing_page(base: str, cik: str, accession: str) -> str:
    """A filing's index page on EDGAR (its documents listed)."""
    return f"{base.rstrip('/')}/Archives/edgar/data/{int(cik)}/{accession.replace('-', '')}/{accession}-index.htm"


def archive_path(row: IndexRow) -> str:
    """The path, under the base URL, of an index row's complete submission."""
    return f"/Archives/{row.path.lstrip('/')}"


def saved_as(row: IndexRow) -> str:
    """Where a fetched submission is kept under the target: EDGAR's own path, so a filing is
    found again by its accession number (``edgar/data/CIK/ACCESSION.txt``)."""
    return f"edgar/data/{int(row.cik)}/{row.accession or PurePosixPath(row.path).stem}.txt"


THRESHOLD = "Request Rate Threshold Exceeded"  # the title of SEC's 403 page past the fair-access rate


def refused_for_rate(status: int, body: bytes) -> bool:
    """EDGAR asking us to slow down: its 403 threshold page, a 429, or a 503."""
    return status in (429, 503) or (status == 403 and THRESHOLD.encode() in body[:8192])
