"""Input rows -> queries, read strictly and as a stream.

Two row formats, one query per line:
- FinAgentBench: ``uuid`` or ``_id``, ``messages`` holding the question and the numbered
  candidates (``[Document Index i] ...`` or ``[Chunk Index i] ...``), optional ``qrel``, ``answer``,
  ``task`` and the FinanceBench metadata in :data:`METADATA_KEYS`;
- native: ``{"id", "question", "candidates": [...], "task"?, "qrel"?, "answer"?}``.

What :func:`read_input` and :func:`read_queries` yield, line by line:
- a :class:`RowWarning` for each thing in a line that is read past but not used (an empty
  candidate, an empty answer); the warnings of a line come before its query or error;
- then a :class:`Query`, or a :class:`RowError` naming the line and the field when the line cannot
  be used (bad UTF-8, bad JSON, nesting deeper than :data:`MAX_DEPTH`, a non-finite number, a
  duplicate key, an unknown key, any field of the wrong type or value). Nothing is coerced: ids are used exactly
  as given, grades must be JSON integers, ``null`` stands for an optional field left out.
A file that cannot be opened or read to its end raises one :class:`InputFileError`, after the
lines before the failure have been yielded.
"""

from __future__ import annotations

import difflib
import gzip
import json
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any, cast, get_args

from pydantic import ValidationError

from prism.models import FILING_TYPES, Query, Task

MARKERS: dict[Task, str] = {"documents": "[Document Index {}] ", "chunks": "[Chunk Index {}] "}
# Instructions that may follow the last candidate in a FinAgentBench prompt.
TRAILERS = ("\nTask: ", "\n\nYour response", "\nResponse Format:", "\n\nReturn ", "\n\nPicked so far:", "\n\nQuestion:")
# Deeper lines are refused: no query nests this deep.
MAX_DEPTH = 64
# Carried by the FinanceBench-derived rows: read past without a warning.
METADATA_KEYS = frozenset({"company", "doc_name", "doc_type", "financebench_id", "question_type", "n_chunks"})
NATIVE_KEYS = frozenset({"id", "question", "candidates", "task", "qrel", "answer"}) | METADATA_KEYS
FINAGENTBENCH_KEYS = frozenset({"uuid", "_id", "messages", "task", "qrel", "answer", "question"}) | METADATA_KEYS
TASKS: tuple[Task, ...] = get_args(Task)

_BOM = b"\xef\xbb\xbf"
_INDEX = re.compile(r"[0-9]+")
_MARKER = {task: re.compile(re.escape(marker.split("{}")[0]) + r"([0-9]+)\] ") for task, marker in MARKERS.items()}


class RowError(ValueError):
    """A line that cannot be used: the rest of the file still runs."""

    def __init__(self, line: int, field: str, message: str, query_id: str | None = None):
        super().__init__(f"line {line}, field '{field}': {message}")
        self.line, self.field, self.message, self.query_id = line, field, message, query_id


@dataclass(frozen=True)
class RowWarning:
    """Something in a line read past but not used; the line's query still runs."""

    line: int
    field: str
    message: str
    query_id: str | None = None

    def __str__(self) -> str:
        return f"line {self.line}, field '{self.field}': {self.message}"


class InputFileError(Exception):
    """A file that cannot be opened or read to its end. The lines up to ``last_good_line`` have been
    read (and yielded); nothing after it is."""

    def __init__(self, source: str, last_good_line: int, reason: str):
        self.source, self.last_good_line, self.reason = source, last_good_line, " ".join(reason.split())
        read = (
            f"Lines 1 to {last_good_line} were read; nothing after line {last_good_line} is."
            if last_good_line
            else "No line of it was read."
        )
        super().__init__(f"Input file {source!r} cannot be read: {self.reason}. {read}")


Item = Query | RowError | RowWarning


def read_input(source: str, open_stream: Callable[[], IO[bytes]]) -> Iterator[Item]:
    """The items of one input file, opened by ``open_stream`` (local or remote, the caller's choice).

    Any failure to open or read it raises :class:`InputFileError` naming ``source``."""
    try:
        stream = open_stream()
    except Exception as err:
        raise InputFileError(source, 0, _reason(err)) from err
    with stream:
        yield from read_queries(stream, source)


def read_queries(stream: IO[bytes], source: str = "<input>") -> Iterator[Item]:
    for line, raw in iter_lines(stream, source=source):
        if line == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]  # a UTF-8 signature, not data
        warnings: list[RowWarning] = []
        try:
            query = parse_row(raw, line, warnings)
        except RowError as err:
            yield from warnings
            yield err
        else:
            yield from warnings
            yield query


def load_queries(path: str | Path, limit: int | None = None) -> list[Query]:
    """The valid queries of a local file (bad rows skipped): for tests, benchmarks, tools."""
    valid = (q for q in read_input(str(path), lambda: open(path, "rb")) if isinstance(q, Query))
    return list(islice(valid, limit))


def iter_lines(stream: IO[bytes], block: int = 1 << 20, source: str = "<input>") -> Iterator[tuple[int, bytes]]:
    """Numbered non-empty lines of a plain or gzipped byte stream, read in blocks.

    A read that fails (a corrupt or truncated archive, a broken connection) raises
    :class:`InputFileError` after every complete line before it; the partial line is not yielded."""
    number = 0
    try:
        head = stream.read(2)
        source_stream = _Prepended(head, stream)
        reader: Callable[[int], bytes] = source_stream.read
        if head == b"\x1f\x8b":  # read1: what is decompressed so far, so a later failure keeps it
            reader = gzip.GzipFile(fileobj=cast(IO[bytes], source_stream)).read1
        pending: list[bytes] = []  # the start of a line longer than the blocks read so far
        while data := reader(block):
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                number += 1
                text = b"".join([*pending, data[start:end]]) if pending else data[start:end]
                pending.clear()
                if text and not text.isspace():
                    yield number, text
                start = end + 1
            if start < len(data):
                pending.append(data[start:])
    except InputFileError:
        raise
    except Exception as err:
        raise InputFileError(source, number, _reason(err)) from err
    if (rest := b"".join(pending)).strip():
        yield number + 1, rest


def parse_row(raw: bytes | str, line: int, warnings: list[RowWarning] | None = None) -> Query:
    """The query of one line; what is read past but not used is added to ``warnings``."""
    row = _load_json(raw, line)
    if not isinstance(row, dict):
        raise RowError(line, "(row)", f"expected a JSON object, got {_kind(row)}")
    notes: list[RowWarning] = [] if warnings is None else warnings
    if "messages" in row:
        return _finagentbench_row(row, line, notes)
    return _native_row(row, line, notes)


def split_prompt(content: str) -> tuple[Task, str, list[str]]:
    """The task, the question and the numbered candidates written in one prompt, whether the
    question comes before the candidates or after them (the two prompt layouts).

    Raises ValueError when the prompt holds no ``Question:`` or no candidate 0, when the question
    is empty, or when the candidate markers skip or repeat an index."""
    task = next((t for t, m in MARKERS.items() if m.format(0) in content), None)
    if task is None:
        raise ValueError("no '[Document Index 0]' or '[Chunk Index 0]' candidate in the prompt")
    first = content.find(MARKERS[task].format(0))
    marks = list(_MARKER[task].finditer(content, first))
    for expected, mark in enumerate(marks):
        index = int(mark.group(1))
        if index < expected:
            raise ValueError(f"the marker '{mark.group(0).strip()}' appears twice (after index {expected - 1})")
        if index > expected:
            raise ValueError(f"the marker '{MARKERS[task].format(expected).strip()}' is missing (before index {index})")
    starts = [m.end() for m in marks]
    candidates = [content[start : mark.start()].strip() for start, mark in zip(starts, marks[1:])]
    # The earliest of the trailing instructions; rfind, since a text may quote one too.
    ends = [at for t in TRAILERS if (at := content.rfind(t, starts[-1])) >= 0]
    end = min(ends, default=len(content))
    candidates.append(content[starts[-1] : end].strip())
    if content.rfind("Question:", 0, first) >= 0:
        return task, _question(content, first), candidates
    after = content.rfind("\n\nQuestion:", starts[-1])
    if after < 0:
        raise ValueError("no 'Question:' before or after the candidates")
    # Question last: the question runs to the first blank line after it.
    stop = content.find("\n\n", after + 2)
    return task, _question(content[: stop if stop >= 0 else len(content)], None, after), candidates


def _question(content: str, before: int | None, at: int | None = None) -> str:
    before = len(content) if before is None else before
    at = content.rfind("Question:", 0, before) if at is None else content.find("Question:", at)
    if at < 0:
        raise ValueError("no 'Question:' before the candidates")
    # The first line is what follows "Question:" on its own line.
    lines = [ln.strip() for ln in content[at + len("Question:") : before].rstrip().split("\n")]
    if len(lines) > 1 and lines[-1].endswith(":"):  # a heading such as "Text chunks:"
        lines.pop()
    question = " ".join(ln for ln in lines if ln)
    if not question:
        raise ValueError("the 'Question:' before the candidates is empty")
    return question


# --- decoding --------------------------------------------------------------------------------


class _Flagged:
    """A value the JSON hooks refused, kept in place so its path can be named."""

    def __init__(self, message: str):
        self.message = message


class _Parser:
    """json.loads hooks that keep what they refuse, so the first refusal's path can be named."""

    def __init__(self) -> None:
        self.flagged = False

    def constant(self, name: str) -> _Flagged:
        self.flagged = True
        return _Flagged(f"{name} is not a number JSON allows (non-finite numbers are refused)")

    def number(self, text: str) -> float | _Flagged:
        value = float(text)
        if math.isfinite(value):
            return value
        self.flagged = True
        return _Flagged(f"{text} is too large to be a finite number")

    def pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            self.flagged = True
            keys = [k for k, _ in pairs]
            key = next(k for i, k in enumerate(keys) if k in keys[:i])
            obj[key] = _Flagged(f"the key '{key}' appears more than once; one of its values would be lost")
        return obj


def _load_json(raw: bytes | str, line: int) -> Any:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            byte = raw[err.start]
            raise RowError(line, "(row)", f"not valid UTF-8: byte 0x{byte:02x} at byte offset {err.start}") from None
    else:
        text = raw
    parser = _Parser()
    try:
        row = json.loads(
            text, parse_constant=parser.constant, parse_float=parser.number, object_pairs_hook=parser.pairs
        )
    except json.JSONDecodeError as err:
        raise RowError(line, "(row)", f"not valid JSON: {err.msg} (column {err.colno})") from None
    except RecursionError:  # the decoder's own bound, far deeper than ours
        raise RowError(line, "(row)", f"nested more than {MAX_DEPTH} levels deep (the limit)") from None
    except ValueError as err:  # e.g. an integer of more than 4300 digits
        raise RowError(line, "(row)", f"not valid JSON: {err}") from None
    if (depth := _depth(row)) > MAX_DEPTH:
        raise RowError(line, "(row)", f"nested {depth} levels deep; at most {MAX_DEPTH} are allowed")
    if parser.flagged:
        field, flagged = next(_flagged(row, "(row)"))
        raise RowError(line, field, flagged.message)
    return row


def _depth(value: Any) -> int:
    """How deeply the objects and lists of a parsed value nest."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _flagged(value: Any, path: str) -> Iterator[tuple[str, _Flagged]]:
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, _Flagged):
            yield where, item
        elif isinstance(item, dict):
            stack.extend((_field(where, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))


def _field(path: str, key: str) -> str:
    return key if path == "(row)" else f"{path}.{key}"


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}
    return "nothing (missing or null)" if value is None else names.get(type(value), "a number")


def _reason(err: BaseException) -> str:
    if isinstance(err, EOFError):
        return "the gzip archive is truncated (it ends before its end-of-stream marker)"
    if isinstance(err, gzip.BadGzipFile | zlib.error):
        return f"the gzip archive is corrupt ({err})"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


# --- rows ------------------------------------------------------------------------------------


def _finagentbench_row(row: dict, line: int, warnings: list[RowWarning]) -> Query:
    query_id = _row_id(row, line, "uuid" if row.get("uuid") is not None else "_id")
    if row.get("uuid") is not None and row.get("_id") is not None and row["_id"] != query_id:
        raise RowError(line, "_id", f"differs from 'uuid' ({query_id!r}); give the row one id", query_id)
    check_keys(row, FINAGENTBENCH_KEYS, line, query_id)
    messages = row["messages"]
    if not isinstance(messages, list) or not messages:
        raise RowError(line, "messages", f"expected a non-empty list of messages, got {_kind(messages)}", query_id)
    prompt: tuple[int, str] | None = None
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise RowError(line, f"messages[{i}].content", f"expected a string, got {_kind(content)}", query_id)
        if prompt is None and any(m.format(0) in content for m in MARKERS.values()):
            prompt = i, content
    if prompt is None:
        raise RowError(line, "messages", "no message holds '[Document Index 0]' or '[Chunk Index 0]'", query_id)
    try:
        task, question, candidates = split_prompt(prompt[1])
    except ValueError as err:
        raise RowError(line, f"messages[{prompt[0]}].content", str(err), query_id) from None
    if row.get("task") is not None and _task(row, line, query_id) != task:
        raise RowError(line, "task", f"is {row['task']!r} but the prompt lists {task}", query_id)
    given = row.get("question")
    if given is not None and given != question:
        warnings.append(
            RowWarning(line, "question", "differs from the prompt's question; the prompt's is used", query_id)
        )
    return _query(row, query_id, task, question, candidates, line, warnings)


def _native_row(row: dict, line: int, warnings: list[RowWarning]) -> Query:
    query_id = _row_id(row, line, "id")
    check_keys(row, NATIVE_KEYS, line, query_id)
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        got = "only whitespace" if isinstance(question, str) else _kind(question)
        raise RowError(line, "question", f"expected a question, got {got}", query_id)
    candidates = row.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        got = "an empty list" if candidates == [] else _kind(candidates)
        raise RowError(line, "candidates", f"expected a non-empty list of strings, got {got}", query_id)
    for i, candidate in enumerate(candidates):
        if not isinstance(candidate, str):
            raise RowError(line, f"candidates[{i}]", f"expected a string, got {_kind(candidate)}", query_id)
    if row.get("task") is not None:
        task = _task(row, line, query_id)
    else:
        task = "documents" if tuple(candidates) == FILING_TYPES else "chunks"
    return _query(row, query_id, task, question, candidates, line, warnings)


def _row_id(row: dict, line: int, key: str) -> str:
    value = row.get(key)
    field = key if key != "_id" else "uuid/_id"
    if not isinstance(value, str) or not value:
        got = "an empty string" if value == "" else _kind(value)
        raise RowError(line, field, f"expected a non-empty string id, got {got}")
    if value != value.strip():
        raise RowError(line, field, f"the id {value!r} has leading or trailing whitespace (ids are used as given)")
    return value


def _task(row: dict, line: int, query_id: str) -> Task:
    task = row["task"]
    if task not in TASKS:
        raise RowError(line, "task", f"expected one of {', '.join(TASKS)}, got {task!r}", query_id)
    return cast(Task, task)


def check_keys(row: dict, known: frozenset[str], line: int, query_id: str | None, prefix: str = "") -> None:
    """An unknown key fails its line, rows and question sets alike: every key of a line steers
    what is ranked or judged, so a misspelled one ("qrels" for "qrel", "scop") is not run past."""
    unknown = [key for key in row if key not in known]
    if not unknown:
        return
    key, lowered = unknown[0], {k.lower(): k for k in known}
    guess = lowered.get(key.lower()) or next(iter(difflib.get_close_matches(key, sorted(known), 1, 0.75)), None)
    hint = f"did you mean '{guess}'?" if guess else f"expected one of {', '.join(sorted(known))}"
    raise RowError(line, prefix + key, f"unknown key ({hint})", query_id)


def _query(
    row: dict,
    query_id: str,
    task: Task,
    question: str,
    candidates: list[str],
    line: int,
    warnings: list[RowWarning],
) -> Query:
    if task == "documents" and tuple(candidates) != FILING_TYPES:
        # Document rankers (the prior above all) score these five types, in this order.
        got = ", ".join(candidates[:6]) + (", ..." if len(candidates) > 6 else "")
        expected = ", ".join(FILING_TYPES)
        raise RowError(line, "candidates", f"a documents row ranks the filing types {expected}; got {got}", query_id)
    empty = [i for i, c in enumerate(candidates) if not c.strip()]
    if empty:
        listed = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
        message = f"{len(empty)} candidate(s) hold no text (index {listed}); they are ranked as they are"
        warnings.append(RowWarning(line, "candidates", message, query_id))
    n_chunks = row.get("n_chunks")
    if n_chunks is not None and (type(n_chunks) is not int or n_chunks != len(candidates)):
        raise RowError(line, "n_chunks", f"is {n_chunks!r} but the row holds {len(candidates)} candidates", query_id)
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise RowError(line, "answer", f"expected a string, got {_kind(answer)}", query_id)
    if answer is not None and not answer.strip():
        warnings.append(RowWarning(line, "answer", "is empty; the row has no reference answer", query_id))
        answer = None
    qrel = _qrel(row.get("qrel"), len(candidates), line, query_id)
    try:
        return Query(
            id=query_id, task=task, question=question, candidates=candidates, qrel=qrel, answer=answer, line=line
        )
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(row)"
        raise RowError(line, field, first["msg"], query_id) from None


def _qrel(qrel: Any, n_candidates: int, line: int, query_id: str) -> dict[int, int] | None:
    """Candidate index -> grade: keys are indices written in digits, grades non-negative JSON integers."""
    if qrel is None:
        return None
    if not isinstance(qrel, dict):
        message = f"expected an object of candidate index -> integer grade, got {_kind(qrel)}"
        raise RowError(line, "qrel", message, query_id)
    grades: dict[int, int] = {}
    written: dict[int, str] = {}
    for key, grade in qrel.items():
        if not _INDEX.fullmatch(key):
            raise RowError(line, "qrel", f"the key {key!r} is not a candidate index (digits 0-9 only)", query_id)
        index = int(key)
        if index >= n_candidates:
            message = f"the key {key!r} is outside the candidates 0..{n_candidates - 1}"
            raise RowError(line, "qrel", message, query_id)
        if index in written:
            message = f"the keys {written[index]!r} and {key!r} both name candidate {index}"
            raise RowError(line, "qrel", message, query_id)
        if type(grade) is not int or grade < 0:
            got = f"{grade!r} ({_kind(grade)})" if type(grade) is not int else repr(grade)
            raise RowError(line, f"qrel.{key}", f"expected a non-negative integer grade, got {got}", query_id)
        grades[index], written[index] = grade, key
    return grades


class _Prepended:
    """A stream with bytes already read put back in front."""

    def __init__(self, head: bytes, rest: IO[bytes]):
        self.head, self.rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.rest.read(size)
        if size < 0:
            data, self.head = self.head + self.rest.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        return data + (self.rest.read(size - len(data)) if len(data) < size else b"")
