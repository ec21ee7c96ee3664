"""Question sets: JSONL of questions to answer from a corpus of filings, read strictly.

One question a line: ``{"id", "question", "scope"?: {"company"?, "form_types"?, "period"?},
"qrels"?: [{"filing", "page" | "chunk", "grade"}], "answer"?, "compare"?}``. ``page`` is the 1-based page a
PDF viewer shows, ``chunk`` a chunk id (``<filing>:s3``) for HTML and text filings. A line that
cannot be used is a :class:`RowError` naming its line and field; the rest of the file still runs.
Nothing is coerced: ids and grades are used as given, ``null`` stands for a field left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from prism.datasets import RowError, _kind, _load_json, check_keys, iter_lines
from prism.models import FILING_TYPES, form_type
from prism.options import CompareMode

QUESTION_KEYS = frozenset({"id", "question", "scope", "qrels", "answer", "compare"})
SCOPE_KEYS = frozenset({"company", "form_types", "period"})
QREL_KEYS = frozenset({"filing", "page", "chunk", "grade"})


class Scope(BaseModel):
    model_config = ConfigDict(frozen=True)

    company: str | None = None
    form_types: tuple[str, ...] = ()  # in prism.models.FILING_TYPES spelling; empty: document ranking picks
    period: str | None = None  # "FY2018", "Q2 2023", "latest"; None: read from the question


class EvidenceQrel(BaseModel):
    """A graded piece of evidence: a page of a filing, or one of its chunks."""

    model_config = ConfigDict(frozen=True)

    filing: str
    page: int | None = None
    chunk: str | None = None
    grade: int = Field(ge=0)


# A question's own "compare": a mode, or "none" to leave out the comparison the run asks for.
QuestionCompare = CompareMode | Literal["none"]
COMPARE_VALUES: tuple[str, ...] = (*get_args(CompareMode), "none")


class Question(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    scope: Scope = Scope()
    qrels: tuple[EvidenceQrel, ...] = ()
    answer: str | None = None
    line: int = 0
    compare: QuestionCompare | None = None  # over the run's --compare for this question; None: the run's


def read_questions(stream: IO[bytes], source: str = "<questions>") -> Iterator[Question | RowError]:
    """Every line of a question set as a Question or a RowError; duplicate ids are errors."""
    first: dict[str, int] = {}
    for line, raw in iter_lines(stream, source=source):
        try:
            question = parse_question(raw, line)
        except RowError as err:
            yield err
            continue
        if question.id in first:
            yield RowError(
                line, "id", f"duplicate id {question.id!r} (first on line {first[question.id]})", question.id
            )
            continue
        first[question.id] = line
        yield question


def parse_question(raw: bytes | str, line: int) -> Question:
    row = _load_json(raw, line)
    if not isinstance(row, dict):
        raise RowError(line, "(row)", f"expected a JSON object, got {_kind(row)}")
    qid = row.get("id")
    known = qid if isinstance(qid, str) else None
    check_keys(row, QUESTION_KEYS, line, known, "")
    if not isinstance(qid, str) or not qid.strip():
        raise RowError(line, "id", f"expected a non-empty string, got {_kind(qid)}")
    text = row.get("question")
    if not isinstance(text, str) or not text.strip():
        raise RowError(line, "question", f"expected a non-empty string, got {_kind(text)}", qid)
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise RowError(line, "answer", f"expected a string, got {_kind(answer)}", qid)
    compare = row.get("compare")
    if compare is not None and compare not in COMPARE_VALUES:
        shown = repr(compare) if isinstance(compare, str) else _kind(compare)
        raise RowError(line, "compare", f"expected one of {', '.join(map(repr, COMPARE_VALUES))}, got {shown}", qid)
    return Question(
        id=qid,
        question=text,
        scope=_scope(row.get("scope"), line, qid),
        qrels=_qrels(row.get("qrels"), line, qid),
        answer=answer,
        line=line,
        compare=compare,
    )


def _scope(value: Any, line: int, qid: str) -> Scope:
    if value is None:
        return Scope()
    if not isinstance(value, dict):
        raise RowError(line, "scope", f"expected an object, got {_kind(value)}", qid)
    check_keys(value, SCOPE_KEYS, line, qid, "scope.")
    company, period, forms = value.get("company"), value.get("period"), value.get("form_types")
    if company is not None and (not isinstance(company, str) or not company.strip()):
        raise RowError(line, "scope.company", f"expected a non-empty string, got {_kind(company)}", qid)
    if period is not None and (not isinstance(period, str) or not period.strip()):
        raise RowError(line, "scope.period", f"expected a non-empty string, got {_kind(period)}", qid)
    if period is not None:
        from prism.corpus.periods import PeriodError, parse_period

        try:
            parse_period(period)
        except PeriodError as err:
            raise RowError(line, "scope.period", str(err), qid) from None
    types: list[str] = []
    if forms is not None:
        if not isinstance(forms, list) or not all(isinstance(f, str) for f in forms) or not forms:
            raise RowError(line, "scope.form_types", f"expected a non-empty list of strings, got {_kind(forms)}", qid)
        for i, name in enumerate(forms):
            spelled = form_type(name)
            if spelled not in FILING_TYPES:
                message = f"{name!r} is not a filing type ({', '.join(FILING_TYPES)})"
                raise RowError(line, f"scope.form_types[{i}]", message, qid)
            types.append(spelled)
    return Scope(company=company.strip() if company else None, form_types=tuple(types), period=period)


def _qrels(value: Any, line: int, qid: str) -> tuple[EvidenceQrel, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RowError(line, "qrels", f"expected a list, got {_kind(value)}", qid)
    out: list[EvidenceQrel] = []
    seen: set[tuple[str, int | str | None]] = set()
    for i, item in enumerate(value):
        where = f"qrels[{i}]"
        if not isinstance(item, dict):
            raise RowError(line, where, f"expected an object, got {_kind(item)}", qid)
        check_keys(item, QREL_KEYS, line, qid, f"{where}.")
        filing, page, chunk, grade = (item.get(k) for k in ("filing", "page", "chunk", "grade"))
        if not isinstance(filing, str) or not filing.strip():
            raise RowError(line, f"{where}.filing", f"expected a non-empty string, got {_kind(filing)}", qid)
        if (page is None) == (chunk is None):
            raise RowError(line, where, "give exactly one of 'page' (1-based) and 'chunk' (a chunk id)", qid)
        if page is not None and (type(page) is not int or page < 1):
            raise RowError(line, f"{where}.page", f"expected an integer >= 1 (pages are 1-based), got {page!r}", qid)
        if chunk is not None and (not isinstance(chunk, str) or not chunk.strip()):
            raise RowError(line, f"{where}.chunk", f"expected a non-empty string, got {_kind(chunk)}", qid)
        if type(grade) is not int or grade < 0:
            raise RowError(line, f"{where}.grade", f"expected an integer >= 0, got {grade!r}", qid)
        key = (filing, page if page is not None else chunk)
        if key in seen:
            raise RowError(line, where, f"evidence {filing} {key[1]} is listed twice", qid)
        seen.add(key)
        out.append(EvidenceQrel(filing=filing, page=page, chunk=chunk, grade=grade))
    return tuple(out)
