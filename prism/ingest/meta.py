"""Filing metadata: given in a file beside the filing (``x.pdf`` + ``x.meta.json``) or in a JSONL
for a folder (one record per filing, matched by ``file``, ``doc_name``, ``name`` or ``id``). What
a record does not give is read from the filing itself (prism.ingest.identity)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection
from datetime import date
from typing import Any

from pydantic import ValidationError

from prism.ingest.extract import IngestError
from prism.ingest.models import FilingMeta
from prism.models import form_type

# Keys of a metadata record, by the field they give (FinanceBench's own names included).
_ALIASES: dict[str, tuple[str, ...]] = {
    "company": ("company",),
    "form_type": ("form_type", "form", "doc_type"),
    "fiscal_year": ("fiscal_year", "year", "doc_period"),
    "fiscal_quarter": ("fiscal_quarter", "quarter"),
    "period_end": ("period_end", "period_of_report"),
    "name": ("name", "doc_name"),
    "cik": ("cik",),
    "ticker": ("ticker",),
    "filed": ("filed", "filing_date"),
    "accession": ("accession", "accession_number"),
}
ID_KEYS = ("filing_id", "id")
MATCH_KEYS = ("file", "doc_name", "name", "id", "filing_id")
_PERIOD = re.compile(r"^(?:FY\s*(\d{4})|(\d{4})\s*-?\s*Q([1-4])|Q([1-4])\s*-?\s*(\d{4})|(\d{4}))$", re.IGNORECASE)


def meta_from_record(record: dict[str, Any], source_uri: str, where: str) -> FilingMeta:
    """A metadata record as FilingMeta; unknown scalar keys go to ``extra``. ``where`` names the
    record (a file, a line) in the error a bad field raises."""
    fields: dict[str, Any] = {"source_uri": str(record.get("source_uri") or source_uri)}
    used = {"source_uri", "file", *ID_KEYS}
    for field, keys in _ALIASES.items():
        for key in keys:
            if record.get(key) is not None:
                fields[field] = record[key]
                used.add(key)
                break
    if isinstance(fields.get("form_type"), str):
        fields["form_type"] = form_type(fields["form_type"])
    if isinstance(fields.get("cik"), int | str) and str(fields["cik"]).strip().isdigit():
        fields["cik"] = str(fields["cik"]).strip().zfill(10)  # EDGAR writes a CIK with its leading zeros
    period = record.get("period")
    if period is not None:
        used.add("period")
        fields.update(_period_fields(period, where))
    extra = {k: v for k, v in record.items() if k not in used}
    for key, value in extra.items():
        if not isinstance(value, str | int | float | bool) and value is not None:
            raise IngestError(where, f"metadata field '{key}': expected a string, number or boolean")
    try:
        return FilingMeta(**fields, extra=extra)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise IngestError(where, f"metadata field '{field}': {first['msg']}") from None


def _period_fields(period: Any, where: str) -> dict[str, Any]:
    """ "FY2018", "2023Q2", "Q2 2023", "2018" or an ISO date (the period's end)."""
    text = str(period).strip()
    match = _PERIOD.match(text)
    if match:
        fy, qy, q, q2, qy2, year = match.groups()
        if fy or year:
            return {"fiscal_year": int(fy or year)}
        return {"fiscal_year": int(qy or qy2), "fiscal_quarter": int(q or q2)}
    try:
        return {"period_end": date.fromisoformat(text)}
    except ValueError:
        raise IngestError(where, f"metadata field 'period': {text!r} is not FY2018, 2023Q2, 2018 or a date") from None


def parse_meta_json(data: bytes, where: str) -> dict[str, Any]:
    try:
        record = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise IngestError(where, f"metadata is not valid JSON ({err})") from None
    if not isinstance(record, dict):
        raise IngestError(where, "metadata must be a JSON object")
    return record


def parse_meta_jsonl(
    data: bytes, where: str, files: Collection[str] | None = None
) -> tuple[dict[str, dict[str, Any]], list[IngestError]]:
    """Records by every name they can be matched on, and an error per line that cannot apply:
    not a JSON object, nothing to match by, a second record for a name an earlier line has
    (the first one stands), or, given the ``files`` it can apply to, a ``file`` that names none
    of them. A key spelled like a known one is named too, yet its record applies (unknown_keys)."""
    index: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}  # a name -> the line whose record it matches
    errors: list[IngestError] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        at = f"{where} line {number}"
        try:
            record = parse_meta_json(line, at)
        except IngestError as err:
            errors.append(err)
            continue
        keys = [str(record[k]) for k in MATCH_KEYS if isinstance(record.get(k), str | int) and str(record[k]).strip()]
        keys = list(dict.fromkeys(keys))  # doc_name and name are often the same
        if not keys:
            errors.append(IngestError(at, f"no {'/'.join(MATCH_KEYS)} to match a filing by"))
            continue
        if taken := next((k for k in keys if k in first), None):
            errors.append(IngestError(at, f"a second record for {taken} (first on line {first[taken]}); ignored"))
            continue
        if files is not None and record.get("file") is not None and str(record["file"]) not in files:
            errors.append(IngestError(at, f"file '{record['file']}' names no filing in the folder; ignored"))
            continue
        if unknown := unknown_keys(record):
            errors.append(IngestError(at, unknown))
        for key in keys:
            index[key], first[key] = record, number
    return index, errors


KNOWN_KEYS = frozenset(
    {*(k for keys in _ALIASES.values() for k in keys), *MATCH_KEYS, *ID_KEYS, "period", "source_uri", "file"}
    | {"cik", "ticker", "filed", "fiscal_year_end"}
)


def unknown_keys(record: dict[str, Any]) -> str | None:
    """The keys that look like a misspelling of a known one (difflib ratio 0.8 or more, e.g.
    ``compnay``), said in one line; None when there are none. Other unknown keys are data a
    record may carry (FinanceBench's ``doc_link``, ``gics_sector``) and go to ``extra``
    unsaid. The record still applies: the known keys are used, the misspelled one is not."""
    near = {k: difflib.get_close_matches(k, KNOWN_KEYS, n=1, cutoff=0.8) for k in record if k not in KNOWN_KEYS}
    said = [f"'{k}' (did you mean '{m[0]}'?)" for k, m in near.items() if m]
    if not said:
        return None
    return f"unknown key{'s' if len(said) > 1 else ''} {', '.join(said)}; the rest of the record applies"
