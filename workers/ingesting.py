"""Ingesting one source, the unit of an ingest task: its file (with the other files of its
accession) parsed into filings, each stored once per version in the corpus, or a failure saying
why; and the filing's chunk input for a segment budget stored beside it."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prism.ingest.archives import Member, read_member
from prism.ingest.extract import IngestError
from prism.ingest.filings import filings_from_rows, parse_filing, source_kind
from prism.ingest.models import Chunking, Filing, SourceEntry
from prism.segmenting import TokenCounter
from workers.corpus import Corpus, IngestSummary, Outcome, record_failure
from workers.inputs import put_input
from workers.settings import Settings
from workers.store import open_ranged

_INDEXES: dict[str, bytes] = {}  # seek points of gzip archives, by corpus key: a worker reads many members of one


@dataclass(frozen=True)
class IngestResult:
    outcome: Outcome
    filing_id: str | None = None
    version: str | None = None
    reason: str | None = None  # why it failed
    filing: Filing | None = None  # as parsed, when it was (not for an unchanged version)


def ingest_one(
    corpus: Corpus,
    data: bytes,
    source: str,
    record: dict[str, Any] | None = None,
    chunking: Chunking | None = None,
    counter: TokenCounter | None = None,
    exhibits: Sequence[tuple[str, bytes, str | None]] = (),
) -> IngestResult:
    """One PDF, HTML, text or EDGAR submission file into the corpus; a version is its extracted
    content, so a file rewritten with the same text is "unchanged". A source that gives no
    filing is a failed result, which the catalogue keeps."""
    try:
        filing = parse_filing(data, source, record or {}, chunking=chunking, counter=counter, exhibits=exhibits)
    except IngestError as err:
        return IngestResult("failed", reason=err.reason)
    outcome = corpus.put_filing(filing)
    return IngestResult(outcome, filing.id, filing.version, filing=filing)


def ingest_file(
    corpus: Corpus,
    name: str,
    uri: str,
    data: bytes,
    record: dict[str, Any],
    chunking: Chunking,
    counter: TokenCounter,
    index: dict[str, dict[str, Any]] | None = None,
    segment_tokens: int | None = None,
    fingerprint: str = "",
    exhibits: Sequence[tuple[str, bytes, str | None]] = (),
) -> IngestSummary:
    """One source file (the unit of an ingest task) with the other files of its accession: a
    filing, or the filings inside a rows file.
    With ``segment_tokens``, each filing's chunk input for that budget is stored too, so runs
    over the corpus find it made. A source that gave its filings without an error is recorded
    with its ``fingerprint``, so the next ingest of the same file sends no task."""
    summary = IngestSummary(sources=1)
    parsed: list[Filing] = []  # their inputs are made from them, not from the stored copies
    if source_kind(name) == "rows":
        parsed = _ingest_rows(corpus, summary, data, uri, index or {}, counter)
    else:
        result = ingest_one(corpus, data, uri, record, chunking, counter, exhibits)
        if result.filing_id is None:
            summary.failed += 1
            summary.failures.append(f"{uri}: {result.reason}")
            summary.failed_sources[uri] = result.reason or ""
            if fingerprint:  # the file itself gives no filing: not read again until it changes
                summary.failed_as[uri] = fingerprint
        else:
            count_filing(corpus, summary, result.outcome, result.filing_id)
            parsed = [result.filing] if result.filing is not None else []
            if result.filing is not None and (meta := result.filing.meta).guessed:
                summary.guessed[result.filing_id] = ", ".join(
                    f"{f} from the {meta.origins[f].replace('-', ' ')}" for f in meta.guessed
                )
    if segment_tokens:
        fresh = {(f.id, f.version): f for f in parsed}
        for fid, version in summary.filings.items():
            filing = fresh.get((fid, version)) or corpus.get_filing(fid, version)
            put_input(corpus, filing, segment_tokens, counter)
    if fingerprint and summary.filings and not summary.failed:
        summary.done_sources[uri] = SourceEntry(fingerprint=fingerprint, filings=dict(summary.filings))
    elif summary.filings and not summary.failed:
        summary.cleared.append(uri)  # a failure it had before no longer holds
    return summary


def count_filing(corpus: Corpus, summary: IngestSummary, outcome: Outcome, filing_id: str) -> None:
    head = corpus.head(filing_id)
    assert head is not None  # just stored or found unchanged
    summary.count(outcome, next(v for v in head.versions if v.version == head.latest))
    summary.filings[filing_id] = head.latest
    summary.heads[filing_id] = head


def _ingest_rows(
    corpus: Corpus,
    summary: IngestSummary,
    data: bytes,
    uri: str,
    index: dict[str, dict[str, Any]],
    counter: TokenCounter,
) -> list[Filing]:
    """The filings of a rows file into the corpus; returns those it parsed."""

    def latest(filing_id: str) -> str | None:
        head = corpus.head(filing_id)
        return head.latest if head and corpus.store.exists(corpus.filing_key(filing_id, head.latest)) else None

    rows = filings_from_rows(io.BytesIO(data), uri, index, counter, latest)
    for err in rows.errors:
        record_failure(summary, err)
    for fid in rows.unchanged:
        count_filing(corpus, summary, "unchanged", fid)
    for filing in rows.filings:
        count_filing(corpus, summary, corpus.put_filing(filing), filing.id)
    summary.questions.update(rows.questions)
    return rows.filings


def read_archived(corpus: Corpus, member: Member, settings: Settings) -> bytes:
    """A member's bytes, read by offset from its archive (a local file, or S3 by ranged GETs)
    starting from the seek point before it; ArchiveError when they cannot be had whole."""
    index = None
    if member.index is not None:
        if member.index not in _INDEXES:
            if len(_INDEXES) >= 4:
                _INDEXES.pop(next(iter(_INDEXES)))
            _INDEXES[member.index] = corpus.store.get(member.index)
        index = _INDEXES[member.index]
    with open_ranged(member.archive, settings) as raw:
        return read_member(raw, member, index)
