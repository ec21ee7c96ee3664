"""Archives in an ingest (a daily feed's ``.nc.tar.gz``, a ``.tar`` or ``.zip`` of filings): the
producer lists each one once and makes every member it takes a source of its own, read by a
worker where it lies. A filter (``--forms``, ``--ciks``, ``--question-set``) decides on each
member's header, read when listing, or on an EDGAR index (``--index``), when the members are
not read at all. An archive whose members all ingested is recorded as one source, so the next
ingest of it sends no task and does not list it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from prism.corpus.edgar import IndexRow, parse_index
from prism.corpus.filters import Candidate, Selection, ciks_of, forms_of
from prism.ingest.accession import accession_of
from prism.ingest.archives import Member, archive_kind, list_archive, read_member
from prism.ingest.filings import source_kind
from prism.ingest.models import SourceEntry
from prism.ingest.sgml import head_fields
from prism.runs.questions import read_questions
from producer.sources import Source
from producer.spec import RunError
from workers.corpus import Corpus, IngestSummary, failed_source
from workers.settings import Settings


@dataclass(frozen=True)
class Filter:
    """What an ingest takes of its archives' members: a selection, decided on an EDGAR index's
    rows (by accession number) when one is given, else on each member's own header."""

    selection: Selection = Selection()
    index: dict[str, IndexRow] | None = None
    index_digest: str = ""

    @property
    def key(self) -> str:
        """What the fingerprint of an archive read through this filter holds of it."""
        s = self.selection
        return repr((sorted(s.forms), sorted(s.ciks), sorted(s.companies), self.index_digest))

    def taken(self, members: list[tuple[Member, bytes]]) -> list[Member]:
        if not self.selection.active and self.index is None:
            return [m for m, _ in members]
        candidates = [self._candidate(m, head) for m, head in members]
        keep = self.selection.taken(c for c in candidates if c is not None)
        return [m for m, _ in members if m.uri in keep]

    def _candidate(self, member: Member, head: bytes) -> Candidate | None:
        if self.index is None:
            fields = head_fields(head)
            form, cik, company = (
                fields.get(k) for k in ("CONFORMED SUBMISSION TYPE", "CENTRAL INDEX KEY", "COMPANY CONFORMED NAME")
            )
            return Candidate(member.uri, form, cik, company)
        row = self.index.get(accession_of(member.name) or "")
        return Candidate(member.uri, row.form, row.cik, row.company) if row else None


def filter_of(settings: Settings, index: str | None = None) -> Filter:
    """The filter the settings and ``--index`` ask for; RunError naming the flag that is wrong."""
    try:
        ciks = ciks_of(_ciks_given(settings.ciks))
    except ValueError as err:
        raise RunError(f"--ciks: {err}") from None
    selection = Selection(forms_of(settings.forms), ciks, _companies(settings.question_set))
    if index is None:
        return Filter(selection)
    try:
        data = Path(index).read_bytes()
    except OSError as err:
        raise RunError(f"--index {index}: cannot be read ({err.strerror or err})") from None
    rows = {row.accession: row for row in parse_index(data.decode("latin-1"), index) if row.accession}
    return Filter(selection, rows, hashlib.sha256(data).hexdigest()[:16])


def _ciks_given(value: str | None) -> list[str]:
    if not value:
        return []
    path = Path(value)
    text = path.read_text() if "," not in value and path.is_file() else value
    return [c for line in text.replace(",", "\n").splitlines() for c in line.split()]


def _companies(question_set: str | None) -> tuple[str, ...]:
    if question_set is None:
        return ()
    try:
        with open(question_set, "rb") as stream:
            found = list(read_questions(stream, question_set))
    except OSError as err:
        raise RunError(f"--question-set {question_set}: cannot be read ({err.strerror or err})") from None
    companies = sorted({q.scope.company for q in found if not isinstance(q, Exception) and q.scope.company})
    if not companies:
        raise RunError(f"--question-set {question_set}: no question names a company in its scope")
    return tuple(companies)


@dataclass
class Listed:
    """An archive as this ingest listed it: the members it took, and whether it listed whole."""

    archive: Source
    fingerprint: str
    members: list[str] = field(default_factory=list)  # the URIs of the members taken
    left_out: int = 0
    whole: bool = True  # no failure of its own or of a member
    known: dict[str, SourceEntry] = field(default_factory=dict)  # members ingested before, as the catalogue has them


def expand(
    item: Source, fingerprint: str, chosen: Filter, corpus: Corpus, summary: IngestSummary
) -> tuple[list[Source], Listed]:
    """An archive's members as sources, each read where it lies; the archive's own failures and
    its members' are stored and counted, the members left out counted."""
    kind = archive_kind(item.name)
    assert kind is not None and item.open is not None
    with item.open() as raw:
        listing = list_archive(raw, kind, item.uri, heads=chosen.selection.active and chosen.index is None)
    index_key = None
    if listing.index is not None:
        index_key = f"archives/{hashlib.sha256(f'{item.uri} {fingerprint}'.encode()).hexdigest()[:24]}.gzidx"
        if not corpus.store.exists(index_key):
            corpus.store.put(index_key, listing.index)
    listed = Listed(item, fingerprint, whole=listing.error is None and not listing.failures)
    for name, why in listing.failures:
        summary.merge(failed_source(f"{item.uri}#{name}", why))
    if listing.error is not None:
        summary.merge(failed_source(item.uri, listing.error))
    else:
        summary.cleared.append(item.uri)
    filings = [(m, head) for m, head in listing.members if source_kind(m.name) not in (None, "rows")]
    summary.unsupported += [m.uri for m, _ in listing.members if source_kind(m.name) in (None, "rows")]
    taken = chosen.taken(filings)
    listed.left_out = len(filings) - len(taken)
    summary.left_out += listed.left_out
    listed.members = [m.uri for m in taken]
    stamp = item.stamp
    sources = []
    for member in taken:
        member = member.model_copy(update={"index": index_key})
        sources.append(
            Source(
                member.name,
                member.uri,
                _reader(item.open, member, listing.index),
                {},
                lambda stamp=stamp, m=member: f"{stamp()}#{m.offset}+{m.size}",  # type: ignore[misc]
                member=member,
            )
        )
    return sources, listed


def _reader(open_archive: Callable[[], BinaryIO], member: Member, index: bytes | None) -> Callable[[], bytes]:
    def read() -> bytes:
        with open_archive() as raw:
            return read_member(raw, member, index)

    return read


def settle(listed: list[Listed], summary: IngestSummary) -> dict[str, SourceEntry]:
    """Each archive whose members all ingested (now or before) as one source entry with all their
    filings: the next ingest of it neither lists it nor sends a task."""
    settled = {}
    for archive in listed:
        entries = [summary.done_sources.get(uri) or archive.known.get(uri) for uri in archive.members]
        if not archive.whole or not archive.fingerprint or any(e is None for e in entries):
            continue
        filings = {fid: version for e in entries if e is not None for fid, version in e.filings.items()}
        entry = SourceEntry(fingerprint=archive.fingerprint, filings=filings, left_out=archive.left_out)
        settled[archive.archive.uri] = entry
    return settled
