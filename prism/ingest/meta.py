"""Filing metadata: given in a file beside the filing (``x.pdf`` + ``x.meta.json``) or in a JSONL
for a folder (one record per filing, matched by ``file``, ``doc_name``, ``name`` or ``id``), else
guessed conservatively from the file name and the first page of text, saying which fields were."""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from typing import Any

from pydantic import ValidationError

from prism.ingest.extract import IngestError
from prism.ingest.models import FilingMeta, MetaField

# Keys of a metadata record, by the field they give (FinanceBench's own names included).
_ALIASES: dict[str, tuple[str, ...]] = {
    "company": ("company",),
    "form_type": ("form_type", "form", "doc_type"),
    "fiscal_year": ("fiscal_year", "year", "doc_period"),
    "fiscal_quarter": ("fiscal_quarter", "quarter"),
    "period_end": ("period_end", "period_of_report"),
    "name": ("name", "doc_name"),
}
ID_KEYS = ("filing_id", "id")
MATCH_KEYS = ("file", "doc_name", "name", "id", "filing_id")
_FORMS = (
    (re.compile(r"^(10-?k|10-?k ?annual ?report|annual ?report)$"), "10-K"),
    (re.compile(r"^10-?q$"), "10-Q"),
    (re.compile(r"^8-?k$"), "8-K"),
    (re.compile(r"^def ?-?14a|proxy( statement)?$"), "DEF14A"),
    (re.compile(r"^(earnings|earnings call|earnings call transcript|transcript)$"), "Earnings"),
)
_NAME_FORM = re.compile(r"(?<![a-z0-9])(10-?k|10-?q|8-?k|def-?14a|earnings|annualreport)(?![a-z0-9])", re.IGNORECASE)
_NAME_YEAR = re.compile(r"(?<![0-9])((?:19|20)\d{2})(?:[-_ ]?q([1-4]))?(?![0-9])", re.IGNORECASE)
_TEXT_FORM = re.compile(r"\bFORM\s+(10-K|10-Q|8-K)\b")
_TEXT_PERIOD = re.compile(
    r"for the (fiscal year|quarterly period) ended:?\s+([A-Z][a-z]+\.?\s+\d{1,2},?\s+\d{4})", re.IGNORECASE
)
_TEXT_COMPANY = re.compile(r"\n([^\n]{2,120})\n\s*\(Exact name of registrant as specified in its charter\)", re.I)
_PERIOD = re.compile(r"^(?:FY\s*(\d{4})|(\d{4})\s*-?\s*Q([1-4])|Q([1-4])\s*-?\s*(\d{4})|(\d{4}))$", re.IGNORECASE)
HEAD_CHARS = 6000  # the cover page: where the form, the period and the registrant are written


def form_type(value: str) -> str:
    """The filing type in prism.models.FILING_TYPES spelling when it is one of them, else as given."""
    lowered = value.strip().lower().replace("_", " ")
    for pattern, form in _FORMS:
        if pattern.match(lowered) or pattern.match(lowered.replace(" ", "")):
            return form
    return value.strip()


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


def parse_meta_jsonl(data: bytes, where: str) -> tuple[dict[str, dict[str, Any]], list[IngestError]]:
    """Records by every name they can be matched on, and an error per bad line."""
    index: dict[str, dict[str, Any]] = {}
    errors: list[IngestError] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse_meta_json(line, f"{where} line {number}")
        except IngestError as err:
            errors.append(err)
            continue
        keys = [str(record[k]) for k in MATCH_KEYS if isinstance(record.get(k), str | int) and str(record[k]).strip()]
        if not keys:
            errors.append(IngestError(f"{where} line {number}", f"no {'/'.join(MATCH_KEYS)} to match a filing by"))
        for key in keys:
            index.setdefault(key, record)
    return index, errors


def guess_meta(meta: FilingMeta, name: str, text: str) -> FilingMeta:
    """Fields the metadata lacks, from the cover page (form, period, registrant) and the file
    name ("3M_2018_10K", "acme-2023q2-10q"); each one filled is listed in ``guessed``."""
    head = text[:HEAD_CHARS]
    found: dict[str, Any] = {}
    name_form = _NAME_FORM.search(name)
    name_year = _NAME_YEAR.search(name)
    if match := _TEXT_FORM.search(head):
        found["form_type"] = form_type(match.group(1))
    elif name_form:
        found["form_type"] = form_type(name_form.group(1))
    if match := _TEXT_PERIOD.search(head):
        try:
            end = datetime.strptime(re.sub(r"[.,]", "", match.group(2)).replace("Sept ", "Sep "), "%B %d %Y").date()
            found["period_end"] = end
            found["fiscal_year"] = end.year  # fiscal years are named by the year they end in
        except ValueError:
            pass
    if name_year:
        found.setdefault("fiscal_year", int(name_year.group(1)))
        if name_year.group(2):
            found["fiscal_quarter"] = int(name_year.group(2))
        company = re.sub(r"[_\- ]+$", "", name[: name_year.start()]).strip()
        if company:
            found["company"] = company
    if "company" not in found and (match := _TEXT_COMPANY.search("\n" + head)):
        found["company"] = match.group(1).strip()
    missing = {f: v for f, v in found.items() if getattr(meta, f) is None}
    if not missing:
        return meta
    guessed: list[MetaField] = list(dict.fromkeys([*meta.guessed, *missing]))  # type: ignore[list-item]
    return meta.model_copy(update={**missing, "guessed": guessed})
