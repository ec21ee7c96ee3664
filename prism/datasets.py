"""Input rows -> queries.

Two row formats, one query per line:
- FinAgentBench: ``uuid`` or ``_id``, ``messages`` holding the question and the numbered
  candidates (``[Document Index i] ...`` or ``[Chunk Index i] ...``), optional ``qrel``;
- native: ``{"id", "question", "candidates": [...], "task"?, "qrel"?}``.

A bad row becomes a :class:`RowError` naming its line and field; the rows around it still load.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from prism.models import FILING_TYPES, Query, Task

MARKERS: dict[Task, str] = {"documents": "[Document Index {}] ", "chunks": "[Chunk Index {}] "}
# Instructions that may follow the last candidate in a FinAgentBench prompt.
TRAILERS = ("\nTask: ", "\n\nYour response", "\nResponse Format:", "\n\nReturn ", "\n\nPicked so far:")


class RowError(ValueError):
    def __init__(self, line: int, field: str, message: str, query_id: str | None = None):
        super().__init__(f"line {line}, field '{field}': {message}")
        self.line, self.field, self.message, self.query_id = line, field, message, query_id


def iter_lines(stream: IO[bytes], block: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """Numbered non-empty lines of a plain or gzipped byte stream, read in blocks."""
    head = stream.read(2)
    source: IO[bytes] = _Prepended(head, stream)
    if head == b"\x1f\x8b":
        source = gzip.GzipFile(fileobj=source)  # type: ignore[assignment]
    pending, number = b"", 0
    while data := source.read(block):
        pending += data
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            number += 1
            if end > start:
                yield number, pending[start:end]
            start = end + 1
        pending = pending[start:]
    if pending.strip():
        yield number + 1, pending


def read_queries(stream: IO[bytes]) -> Iterator[Query | RowError]:
    for line, raw in iter_lines(stream):
        try:
            yield parse_row(raw, line)
        except RowError as err:
            yield err


def load_queries(path: str | Path, limit: int | None = None) -> list[Query]:
    """The valid queries of a local file (bad rows skipped): for tests, benchmarks, tools."""
    with open(path, "rb") as stream:
        valid = (q for q in read_queries(stream) if isinstance(q, Query))
        return list(islice(valid, limit))


def parse_row(raw: bytes | str, line: int) -> Query:
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as err:
        raise RowError(line, "(row)", f"not valid JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(row, dict):
        raise RowError(line, "(row)", f"expected a JSON object, got {type(row).__name__}")
    if "messages" in row:
        return _finagentbench_row(row, line)
    return _native_row(row, line)


def split_prompt(content: str) -> tuple[Task, str, list[str]]:
    """The task, the question and the numbered candidates written in one prompt.

    Raises ValueError when the prompt holds no ``Question:`` or no candidate 0.
    """
    task = next((t for t, m in MARKERS.items() if m.format(0) in content), None)
    if task is None:
        raise ValueError("no '[Document Index 0]' or '[Chunk Index 0]' candidate in the prompt")
    marker = MARKERS[task]
    first = content.find(marker.format(0))
    question = _question(content, first)
    candidates: list[str] = []
    start = first
    while True:
        text_start = start + len(marker.format(len(candidates)))
        nxt = content.find(marker.format(len(candidates) + 1), text_start)
        if nxt < 0:
            # The earliest of the trailing instructions; rfind, since a text may quote one too.
            ends = [at for t in TRAILERS if (at := content.rfind(t, text_start)) >= 0]
            candidates.append(content[text_start : min(ends, default=len(content))].strip())
            return task, question, candidates
        candidates.append(content[text_start:nxt].strip())
        start = nxt


def _question(content: str, before: int) -> str:
    at = content.rfind("Question:", 0, before)
    if at < 0:
        raise ValueError("no 'Question:' before the candidates")
    lines = [ln.strip() for ln in content[at + len("Question:") : before].strip().split("\n")]
    if len(lines) > 1 and lines[-1].endswith(":"):  # a heading such as "Text chunks:"
        lines.pop()
    return " ".join(ln for ln in lines if ln)


def _finagentbench_row(row: dict, line: int) -> Query:
    query_id = _row_id(row, line, ("uuid", "_id"))
    messages = row["messages"]
    if not isinstance(messages, list) or not messages:
        raise RowError(line, "messages", "expected a non-empty list of messages", query_id)
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise RowError(line, f"messages[{i}].content", "missing or not a string", query_id)
        if any(m.format(0) in content for m in MARKERS.values()):
            break
    else:
        raise RowError(line, "messages", "no message holds '[Document Index 0]' or '[Chunk Index 0]'", query_id)
    try:
        task, question, candidates = split_prompt(content)
    except ValueError as err:
        raise RowError(line, f"messages[{i}].content", str(err), query_id) from None
    return _query(query_id, task, question, candidates, row.get("qrel"), line, row.get("answer"))


def _native_row(row: dict, line: int) -> Query:
    query_id = _row_id(row, line, ("id",))
    candidates = row.get("candidates")
    if not isinstance(candidates, list) or not candidates or not all(isinstance(c, str) for c in candidates):
        raise RowError(line, "candidates", "expected a non-empty list of strings", query_id)
    task = row.get("task") or ("documents" if tuple(candidates) == FILING_TYPES else "chunks")
    return _query(query_id, task, row.get("question"), candidates, row.get("qrel"), line, row.get("answer"))


def _row_id(row: dict, line: int, keys: tuple[str, ...]) -> str:
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise RowError(line, "/".join(keys), "missing or empty id")


def _query(query_id: str, task, question, candidates: list[str], qrel, line: int, answer=None) -> Query:
    try:
        parsed_qrel = None if qrel is None else {int(k): int(v) for k, v in dict(qrel).items()}
    except (TypeError, ValueError):
        raise RowError(line, "qrel", "expected an object of candidate index -> integer grade", query_id) from None
    if parsed_qrel and not all(0 <= i < len(candidates) for i in parsed_qrel):
        raise RowError(line, "qrel", f"an index is outside 0..{len(candidates) - 1}", query_id)
    try:
        answer = answer if isinstance(answer, str) and answer.strip() else None
        return Query(
            id=query_id, task=task, question=question, candidates=candidates, qrel=parsed_qrel, answer=answer, line=line
        )
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(row)"
        raise RowError(line, field, first["msg"], query_id) from None


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
