"""The corpus store: filings kept once per version, content-addressed, in any Store, at its root
(``prism ingest --corpus X`` writes X/manifest.json).

filings/<filing>/<version>.json.gz   a Filing (gzip JSON), written once
filings/<filing>/head.json           its versions, oldest first, and the latest (a FilingEntry)
failures/<source>.json               a source that gave no filing, and why (an IngestFailure)
manifest.json                        every filing's versions, every failure, every source file's
                                     fingerprint (a CorpusManifest), updated by each ingest
versions/<digest>.json               every filing's latest version, one per corpus state
inputs/<filing>/<version>-...json    a filing's chunk input for a segment budget

<filing> and <source> are safe_name()s (workers/store.py): a readable part and a hash of the whole.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel

from prism.ingest import (
    Chunking,
    CorpusManifest,
    Filing,
    FilingEntry,
    IngestError,
    IngestFailure,
    SourceEntry,
    VersionEntry,
    filings_from_rows,
    parse_filing,
    parse_meta_json,
    parse_meta_jsonl,
    source_kind,
    stem,
)
from prism.ingest.accession import accession_of, index_types, is_index, primary_first
from prism.ingest.filings import FOLDER_META, META_SUFFIXES, filing_id_of
from prism.ingest.meta import unknown_keys
from prism.options import RunOptions
from prism.segmenting import TokenCounter
from workers.store import Store, file_stamp, get_model, put_model, safe_name

if TYPE_CHECKING:  # the rankers' modules load where inputs are made, not where files are listed
    from prism.strategies import chunks

LAYOUT = ("filings/", "failures/", "versions/", "inputs/")  # and manifest.json
Outcome = Literal["ingested", "unchanged", "new_version", "failed"]


def _encoding(counter: TokenCounter) -> str:
    return counter.encoding.name if counter.encoding is not None else "estimate"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Corpus:
    """Filings, their versions and the ingest failures, in one Store."""

    def __init__(self, store: Store):
        self.store = store

    @staticmethod
    def filing_key(filing_id: str, version: str) -> str:
        return f"filings/{safe_name(filing_id)}/{version}.json.gz"

    @staticmethod
    def head_key(filing_id: str) -> str:
        return f"filings/{safe_name(filing_id)}/head.json"

    @staticmethod
    def failure_key(source: str) -> str:
        return f"failures/{safe_name(source)}.json"

    manifest_key = "manifest.json"

    def head(self, filing_id: str) -> FilingEntry | None:
        try:
            return get_model(self.store, self.head_key(filing_id), FilingEntry)
        except KeyError:
            return None

    def put_filing(self, filing: Filing) -> Outcome:
        """Store a filing version once: "unchanged" when it is already the latest (nothing
        written), "new_version" when the filing had another latest, else "ingested"."""
        head = self.head(filing.id)
        key = self.filing_key(filing.id, filing.version)
        if head and head.latest == filing.version and self.store.exists(key):
            return "unchanged"
        body = gzip.compress(filing.model_dump_json().encode(), compresslevel=6, mtime=0)
        self.store.put(key, body, if_absent=True)
        entry = VersionEntry(
            version=filing.version,
            content_sha256=filing.content_sha256,
            key=key,
            ingested_at=_utcnow(),
            chunks=len(filing.chunks),
            tokens=filing.tokens,
            pages=filing.pages,
            empty_pages=filing.empty_pages,
        )
        if head is None:
            head = FilingEntry(id=filing.id, meta=filing.meta, latest=filing.version, versions=[entry])
            outcome: Outcome = "ingested"
        else:
            # A filing changed back to an earlier version keeps its first record, now latest again.
            versions = [v for v in head.versions if v.version != filing.version] + [
                next((v for v in head.versions if v.version == filing.version), entry)
            ]
            head = head.model_copy(update={"meta": filing.meta, "latest": filing.version, "versions": versions})
            outcome = "new_version"
        put_model(self.store, self.head_key(filing.id), head)
        return outcome

    def get_filing(self, filing_id: str, version: str | None = None) -> Filing:
        """A stored version (the latest by default); KeyError when there is none."""
        if version is None:
            head = self.head(filing_id)
            if head is None:
                raise KeyError(filing_id)
            version = head.latest
        return Filing.model_validate_json(gzip.decompress(self.store.get(self.filing_key(filing_id, version))))

    def put_failure(self, source: str, reason: str) -> None:
        put_model(self.store, self.failure_key(source), IngestFailure(source=source, reason=reason, at=_utcnow()))

    def clear_failure(self, source: str) -> None:
        if self.store.exists(self.failure_key(source)):
            self.store.delete(self.failure_key(source))

    def update_manifest(self, manifest: CorpusManifest, summary: IngestSummary) -> CorpusManifest:
        """The manifest with what one ingest changed: the heads of the filings it stored, its
        failures, and its sources' fingerprints (one writer: the producer, after the ingest
        tasks are done). Nothing is listed: the cost follows the change, not the corpus."""
        at = _utcnow()
        for source, reason in summary.failed_sources.items():
            manifest.failures[source] = IngestFailure(source=source, reason=reason, at=at)
            manifest.sources.pop(source, None)
        for source, entry in summary.done_sources.items():
            manifest.failures.pop(source, None)
            manifest.sources[source] = entry
        for fid, version in summary.filings.items():
            known = manifest.filings.get(fid)
            if known is None or known.latest != version:
                head = self.head(fid)
                if head is not None:
                    manifest.filings[fid] = head
        manifest.filings = dict(sorted(manifest.filings.items()))
        manifest.failures = dict(sorted(manifest.failures.items()))
        manifest.sources = dict(sorted(manifest.sources.items()))
        manifest.written_at = at
        put_model(self.store, self.manifest_key, manifest)
        return manifest

    def manifest(self) -> CorpusManifest:
        try:
            return get_model(self.store, self.manifest_key, CorpusManifest)
        except KeyError:
            return CorpusManifest()

    def put_versions(self, versions: dict[str, str]) -> str:
        """Every filing's latest version, kept once per corpus state (by digest): runs over an
        unchanged corpus name the same snapshot instead of each writing its own copy."""
        body = json.dumps(dict(sorted(versions.items())), separators=(",", ":")).encode()
        name = hashlib.sha256(body).hexdigest()[:24]
        key = f"versions/{name}.json"
        if not self.store.exists(key):
            self.store.put(key, body, if_absent=True)
        return name

    def versions(self, name: str) -> dict[str, str]:
        return json.loads(self.store.get(f"versions/{name}.json"))

    @staticmethod
    def input_key(filing_id: str, version: str, budget: int, encoding: str) -> str:
        return f"inputs/{safe_name(filing_id)}/{version}-{budget}-{encoding}.json"

    def put_input(self, filing: Filing, budget: int, counter: TokenCounter) -> tuple[str, FilingInput]:
        """A filing's chunk input for a segment budget, computed once per version and budget and
        shared by every question (and run) over it: prompt costs, and the chunks cut to fit."""
        key = self.input_key(filing.id, filing.version, budget, _encoding(counter))
        try:
            return key, get_model(self.store, key, FilingInput)
        except KeyError:
            pass
        shared = self.make_input(filing, budget, counter)
        put_model(self.store, key, shared, if_absent=True)
        return key, shared

    @classmethod
    def make_input(cls, filing: Filing, budget: int, counter: TokenCounter) -> FilingInput:
        """A filing's chunk input for a segment budget, made here; nothing is stored."""
        from prism.strategies import chunks

        data = chunks.prepare("", [c.text for c in filing.chunks], counter, budget, counts=cls.counts(filing, counter))
        return FilingInput(
            filing_id=filing.id,
            version=filing.version,
            costs=data.costs,
            truncated={i: data.chunks[i] for i in data.truncated},
            exact_counts=data.exact_counts,
        )

    def read_input(self, filing: Filing, budget: int, counter: TokenCounter) -> FilingInput:
        """A filing version's chunk input for a budget: the stored one, else made here and not
        stored (an estimate writes nothing)."""
        try:
            return get_model(
                self.store, self.input_key(filing.id, filing.version, budget, _encoding(counter)), FilingInput
            )
        except KeyError:
            return self.make_input(filing, budget, counter)

    def input_for(self, filing_id: str, version: str, budget: int, counter: TokenCounter) -> tuple[str, FilingInput]:
        """A filing version's chunk input for a budget, read when made, else made from the filing."""
        key = self.input_key(filing_id, version, budget, _encoding(counter))
        try:
            return key, get_model(self.store, key, FilingInput)
        except KeyError:
            return self.put_input(self.get_filing(filing_id, version), budget, counter)

    def token_costs(self, entry: FilingEntry, version: str, budget: int, counter: TokenCounter) -> list[int]:
        """A filing version's chunks' prompt tokens, from what the corpus stores, no filing read:
        its chunk input for this budget, else one for another budget (a chunk cut to fit there is
        cut to fit here), else its chunks and tokens spread evenly (an ingest that stored none)."""
        from prism.segmenting import MARKER_TOKENS
        from prism.strategies.chunks import MAX_CHUNK_SHARE

        try:
            return get_model(
                self.store, self.input_key(entry.id, version, budget, _encoding(counter)), FilingInput
            ).costs
        except KeyError:
            pass
        prefix = f"inputs/{safe_name(entry.id)}/{version}-"
        if other := next(iter(self.store.keys(prefix)), None):
            most = max(MARKER_TOKENS + 16, budget // MAX_CHUNK_SHARE)
            return [min(cost, most) for cost in get_model(self.store, other, FilingInput).costs]
        stored = next(v for v in entry.versions if v.version == version)
        each = stored.tokens // stored.chunks + MARKER_TOKENS if stored.chunks else 0
        return [each] * stored.chunks

    @staticmethod
    def counts(filing: Filing, counter: TokenCounter) -> list[int] | None:
        """The chunks' token counts from the ingest, when it counted them with this tokenizer."""
        counted = filing.exact_tokens and filing.encoding == _encoding(counter)
        return [c.tokens for c in filing.chunks] if counted else None

    @staticmethod
    def as_chunk_input(filing: Filing, shared: FilingInput) -> chunks.ChunkInput:
        """A filing and its stored input, already in hand, as a ChunkInput with no question."""
        from prism.strategies import chunks

        texts = [shared.truncated.get(c.index, c.text) for c in filing.chunks]
        return chunks.ChunkInput(
            question="",
            chunks=texts,
            costs=shared.costs,
            truncated=sorted(shared.truncated),
            exact_counts=shared.exact_counts,
        )

    def stored_bytes(self) -> int:
        """The corpus's own objects only: the folder may hold other things."""
        keys = [k for prefix in LAYOUT for k in self.store.keys(prefix)]
        if self.store.exists(self.manifest_key):
            keys.append(self.manifest_key)
        return sum(len(self.store.get(k)) for k in keys)


class FilingInput(BaseModel):
    """What chunk ranking needs of a filing beyond its chunks, for one segment budget; the texts
    stay in the filing (only a chunk cut to fit the budget is kept here)."""

    filing_id: str
    version: str
    costs: list[int]
    truncated: dict[int, str] = {}
    exact_counts: bool = True


class IngestSummary(BaseModel):
    sources: int = 0  # files read (a rows file counts once, however many filings it holds)
    ingested: int = 0  # filings stored for the first time
    unchanged: int = 0
    new_versions: int = 0
    failed: int = 0  # sources (or rows) that gave no filing; each has a stored failure
    pages: int = 0  # over the filings seen (PDF pages and page rows)
    empty_pages: int = 0
    chunks: int = 0
    tokens: int = 0
    seconds: float = 0.0
    skipped: int = 0  # sources whose fingerprint had not changed: not read, no task sent
    filings: dict[str, str] = {}  # filing id -> its latest version
    questions: dict[str, str] = {}  # query id of a benchmark row -> the filing it ranks over
    failures: list[str] = []  # "source: reason"
    unsupported: list[str] = []  # files of a folder that are no filing nor metadata: not read
    failed_sources: dict[str, str] = {}  # source -> why it gave no filing
    guessed: dict[str, str] = {}  # filing id -> its identity fields read from the cover or the file name
    done_sources: dict[str, SourceEntry] = {}  # source -> its fingerprint and the filings it gave

    def count(self, outcome: Outcome, entry: VersionEntry | None) -> None:
        if outcome == "ingested":
            self.ingested += 1
        elif outcome == "unchanged":
            self.unchanged += 1
        elif outcome == "new_version":
            self.new_versions += 1
        if entry is not None:
            self.pages += entry.pages
            self.empty_pages += entry.empty_pages
            self.chunks += entry.chunks
            self.tokens += entry.tokens

    def merge(self, other: IngestSummary) -> None:
        """Add one file's summary (an ingest task's) to the whole source's."""
        for name in ("sources", "ingested", "unchanged", "new_versions", "failed", "pages", "empty_pages", "skipped"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.chunks += other.chunks
        self.tokens += other.tokens
        self.filings.update(other.filings)
        self.questions.update(other.questions)
        self.failures.extend(other.failures)
        self.failed_sources.update(other.failed_sources)
        self.guessed.update(other.guessed)
        self.done_sources.update(other.done_sources)


@dataclass(frozen=True)
class Source:
    """One file to ingest: its name (a path or key), where it is read from, its metadata record."""

    name: str
    uri: str
    read: Any  # () -> bytes
    record: dict[str, Any]
    stamp: Any  # () -> str: its size and modification time or ETag, without reading it
    fingerprint: str = ""  # the stamp with its record, the chunking and the metadata file
    exhibits: tuple[Exhibit, ...] = ()  # further files of its EDGAR accession, read after it


@dataclass(frozen=True)
class Exhibit:
    """A file of the same accession as a filing's main file: its pages follow the filing's."""

    name: str
    uri: str
    read: Any  # () -> bytes
    stamp: Any
    type: str | None = None  # its document type, when an EDGAR index page gives it


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
    filing stores a failure."""
    try:
        filing = parse_filing(data, source, record or {}, chunking=chunking, counter=counter, exhibits=exhibits)
    except IngestError as err:
        corpus.put_failure(source, err.reason)
        return IngestResult("failed", reason=err.reason)
    outcome = corpus.put_filing(filing)
    corpus.clear_failure(source)
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
        else:
            _count(corpus, summary, result.outcome, result.filing_id)
            parsed = [result.filing] if result.filing is not None else []
            if result.filing is not None and (meta := result.filing.meta).guessed:
                summary.guessed[result.filing_id] = ", ".join(
                    f"{f} from the {meta.origins[f].replace('-', ' ')}" for f in meta.guessed
                )
    if segment_tokens:
        fresh = {(f.id, f.version): f for f in parsed}
        for fid, version in summary.filings.items():
            filing = fresh.get((fid, version)) or corpus.get_filing(fid, version)
            corpus.put_input(filing, segment_tokens, counter)
    if fingerprint and summary.filings and not summary.failed:
        summary.done_sources[uri] = SourceEntry(fingerprint=fingerprint, filings=dict(summary.filings))
    return summary


def ingest_source(
    source: str | Path | Sequence[str | Path] | Store,
    store: Store,
    chunking: Chunking | None = None,
    meta: str | Path | None = None,
    counter: TokenCounter | None = None,
    dispatch: Callable[[list[Source]], Iterable[IngestSummary]] | None = None,
    segment_tokens: int = RunOptions.model_fields["segment_tokens"].default,
) -> IngestSummary:
    """Every filing under a folder (or a file, a list of files, or every key of a Store) into the
    corpus in ``store``; the manifest is written at the end.

    Files: .pdf .htm .html .txt, and .jsonl / .jsonl.gz benchmark rows (suffixes in any case).
    Metadata: ``x.meta.json`` beside ``x.pdf``, else the folder's ``metadata.jsonl``, else the
    ``meta`` JSONL given here (e.g. FinanceBench's document information), else guessed.
    Named in the summary and the manifest's failures, never dropped: content that is not what
    its name says, a link to nothing, a metadata line or file that cannot apply or has a
    misspelled key; files that are neither filings nor metadata are listed in ``unsupported``.

    ``dispatch`` ingests the files elsewhere (the fleet: one task per file) and gives each file's
    summary as it ends; without it they are ingested here, one at a time.
    """
    started = time.perf_counter()
    chunking = chunking or Chunking()
    corpus = Corpus(store)
    summary = IngestSummary()
    index: dict[str, dict[str, Any]] = {}  # the --meta records, filled by _sources
    given = (str(meta), Path(meta).read_bytes()) if meta is not None else None
    manifest = corpus.manifest()
    settled = _digest([chunking.model_dump(), hashlib.sha256(given[1]).hexdigest() if given else None])
    items: list[Source] = []
    taken: dict[str, str] = {}
    read_meta: set[str] = set()
    for item in accessions(list(_sources(source, index, corpus, summary, given, read_meta))):
        if source_kind(item.name) != "rows":  # two files that would be one filing: the second fails
            fid = filing_id_of(item.uri, item.record)
            if taken.setdefault(fid, item.uri) != item.uri:
                reason = f"filing id '{fid}' is taken by {taken[fid]}; give an id in its metadata"
                summary.merge(failed_source(corpus, item.uri, reason))
                continue
        fingerprint = _fingerprint(item, settled)
        if fingerprint and _unchanged(manifest, item.uri, fingerprint, summary):
            continue
        items.append(replace(item, fingerprint=fingerprint))
    if dispatch is None:
        counter = counter or TokenCounter(chunking.encoding)  # loaded only when something is read here
        for item in items:
            try:
                data = item.read()
                exhibits = [(e.uri, e.read(), e.type) for e in item.exhibits]
            except (OSError, KeyError) as err:
                summary.merge(failed_source(corpus, item.uri, f"cannot be read ({err})"))
                continue
            summary.merge(
                ingest_file(
                    corpus,
                    item.name,
                    item.uri,
                    data,
                    item.record,
                    chunking,
                    counter,
                    index,
                    segment_tokens,
                    fingerprint=item.fingerprint,
                    exhibits=exhibits,
                )
            )
    else:
        for part in dispatch(items):
            summary.merge(part)
    for failed in list(manifest.failures):  # a metadata file read again: what it no longer says is gone
        if _META_LINE.sub("", failed) in read_meta and failed not in summary.failed_sources:
            del manifest.failures[failed]
            corpus.clear_failure(failed)
    corpus.update_manifest(manifest, summary)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _fingerprint(item: Source, settled: str) -> str:
    """What says a source is as it was last ingested, read without reading the file: its stamp,
    its metadata record, the chunking and the metadata file; "" when it cannot be had."""
    try:
        stamp = item.stamp()
    except Exception:  # noqa: BLE001 - a missing or refused source is read, and fails, as usual
        return ""
    return _digest([stamp, item.record, settled])


def _unchanged(manifest: CorpusManifest, uri: str, fingerprint: str, summary: IngestSummary) -> bool:
    """Count a source whose fingerprint and filings are as the manifest holds them; no task is
    sent for it. Its filings' versions were confirmed by their content digest when it was last
    ingested; a touched file (new fingerprint) is read and confirmed again."""
    entry = manifest.sources.get(uri)
    if entry is None or entry.fingerprint != fingerprint:
        return False
    heads = [manifest.filings.get(fid) for fid in entry.filings]
    if any(h is None or h.latest != entry.filings[h.id] for h in heads):
        return False
    summary.sources += 1
    summary.skipped += 1
    for head in heads:
        assert head is not None
        summary.count("unchanged", next(v for v in head.versions if v.version == head.latest))
        summary.filings[head.id] = head.latest
    return True


def failed_source(corpus: Corpus, uri: str, reason: str) -> IngestSummary:
    """A source that gave no filing: its failure stored, and a summary that counts it."""
    corpus.put_failure(uri, reason)
    return IngestSummary(sources=1, failed=1, failures=[f"{uri}: {reason}"], failed_sources={uri: reason})


def _count(corpus: Corpus, summary: IngestSummary, outcome: Outcome, filing_id: str) -> None:
    head = corpus.head(filing_id)
    assert head is not None  # just stored or found unchanged
    summary.count(outcome, next(v for v in head.versions if v.version == head.latest))
    summary.filings[filing_id] = head.latest


def _fail(corpus: Corpus, summary: IngestSummary, err: IngestError) -> None:
    corpus.put_failure(err.source, err.reason)
    summary.failed += 1
    summary.failures.append(str(err))
    summary.failed_sources[err.source] = err.reason


def _ingest_rows(
    corpus: Corpus,
    summary: IngestSummary,
    data: bytes,
    uri: str,
    index: dict[str, dict[str, Any]],
    counter: TokenCounter,
) -> list[Filing]:
    """The filings of a rows file into the corpus; returns those it parsed."""
    import io

    def latest(filing_id: str) -> str | None:
        head = corpus.head(filing_id)
        return head.latest if head and corpus.store.exists(corpus.filing_key(filing_id, head.latest)) else None

    rows = filings_from_rows(io.BytesIO(data), uri, index, counter, latest)
    for err in rows.errors:
        _fail(corpus, summary, err)
    for fid in rows.unchanged:
        _count(corpus, summary, "unchanged", fid)
    for filing in rows.filings:
        _count(corpus, summary, corpus.put_filing(filing), filing.id)
    summary.questions.update(rows.questions)
    return rows.filings


def accessions(items: list[Source]) -> list[Source]:
    """Files of one EDGAR accession as one source: the form first, its exhibits after it. An
    accession's ``-index.htm`` page is not a filing; it gives the documents' types."""
    groups: dict[str, list[Source]] = {}
    for item in items:
        number = accession_of(item.name) if source_kind(item.name) in ("html", "text", "pdf") else None
        groups.setdefault(number or f"\0{item.name}", []).append(item)
    out: list[Source] = []
    for group in groups.values():
        pages = [i for i in group if is_index(i.name)]
        files = [i for i in group if not is_index(i.name)]
        if len(group) == 1 or not files:
            out.extend(group)
            continue
        types: dict[str, str] = {}
        for page in pages:
            types.update(index_types(page.read()))
        first, *rest = [next(i for i in files if i.name == n) for n in primary_first([i.name for i in files], types)]
        exhibits = tuple(
            Exhibit(i.name, i.uri, i.read, i.stamp, types.get(PurePosixPath(i.name).name.lower())) for i in rest
        )
        stamps = [first.stamp, *(e.stamp for e in exhibits), *(p.stamp for p in pages)]
        out.append(replace(first, exhibits=exhibits, stamp=lambda stamps=stamps: "+".join(s() for s in stamps)))
    return sorted(out, key=lambda i: i.name)


def _sources(
    source: str | Path | Sequence[str | Path] | Store,
    index: dict[str, dict[str, Any]],
    corpus: Corpus,
    summary: IngestSummary,
    meta: tuple[str, bytes] | None = None,
    read_meta: set[str] | None = None,
) -> Iterator[Source]:
    """The filing files of a source in name order, each with its metadata record. Fills ``index``
    from ``meta`` (a --meta JSONL: its name and bytes) and ``read_meta`` with the metadata files
    read. Stored failures: a link to nothing, a metadata line or file that cannot apply (or has a
    misspelled key); other files are listed in ``summary.unsupported``; hidden ones are skipped."""
    read_meta = set() if read_meta is None else read_meta
    folder_given = False  # a --meta record naming a file is checked only against a folder's files
    if isinstance(source, str | Path | list | tuple):
        paths = [Path(source)] if isinstance(source, str | Path) else [Path(p) for p in source]
        files: dict[str, Path] = {}
        for path in paths:
            if path.is_dir():
                folder_given = True
                for p in sorted(path.rglob("*")):
                    if _hidden(p.relative_to(path).as_posix()):
                        continue
                    if p.is_file():
                        files[p.resolve().as_posix()] = p
                    elif p.is_symlink() and not p.exists():
                        _dangling(corpus, summary, p)
            elif path.is_symlink() and not path.exists():
                _dangling(corpus, summary, path)
            else:
                files[path.resolve().as_posix()] = path  # a missing file fails when it is read
        names = sorted(files)

        def reader(name: str):
            return files[name].read_bytes

        def stamper(name: str):
            return lambda: file_stamp(files[name])

        def uri_of(name: str) -> str:
            return name
    else:
        store = cast(Store, source)
        folder_given = True
        names = sorted(k for k in store.keys("") if not _hidden(k))

        def reader(name: str):
            return lambda: store.get(name)

        def stamper(name: str):
            return lambda: store.stamp(name)

        def uri_of(name: str) -> str:
            return f"{store.uri.rstrip('/')}/{name}"

    def folder_of(name: str) -> str:
        return str(PurePosixPath(name).parent)

    filings: dict[str, set[str]] = {}  # a folder -> the names of its filing files
    for name in names:
        if source_kind(name) is not None:
            filings.setdefault(folder_of(name), set()).add(PurePosixPath(name).name)
    if meta is not None:
        read_meta.add(meta[0])
        everywhere = {n for f in filings.values() for n in f} if folder_given else None
        found, errors = parse_meta_jsonl(meta[1], meta[0], everywhere)
        index.update(found)
        for err in errors:
            _fail(corpus, summary, err)
    present = set(names)
    folder_indexes: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:  # each folder's metadata.jsonl, read whole: a line for no file there is named too
        if PurePosixPath(name).name == FOLDER_META:
            read_meta.add(uri_of(name))
            found, errors = parse_meta_jsonl(reader(name)(), uri_of(name), filings.get(folder_of(name), set()))
            folder_indexes[folder_of(name)] = found
            for err in errors:
                _fail(corpus, summary, err)
    for name in names:
        base = PurePosixPath(name).name
        if source_kind(name) is None:
            if base.lower().endswith(".meta.json"):  # read for the filing of its stem, if there is one
                stems = {stem(n) for n in filings.get(folder_of(name), ())}
                if not base.endswith(".meta.json") or base.removesuffix(".meta.json") not in stems:
                    read_meta.add(uri_of(name))
                    reason = "no .pdf, .htm, .html, .txt or .jsonl of that name beside it; not used"
                    _fail(corpus, summary, IngestError(uri_of(name), reason))
            elif base.lower() != FOLDER_META and not base.lower().endswith(META_SUFFIXES):
                summary.unsupported.append(uri_of(name))
            continue
        folder = folder_of(name)
        record: dict[str, Any] | None = None
        beside = f"{folder}/{stem(name)}.meta.json" if folder != "." else f"{stem(name)}.meta.json"
        try:
            if beside in present:
                record = parse_meta_json(reader(beside)(), uri_of(beside))
                read_meta.add(uri_of(beside))
                if unknown := unknown_keys(record):
                    _fail(corpus, summary, IngestError(uri_of(beside), unknown))
            else:
                listing = folder_indexes.get(folder, {})
                record = listing.get(base) or listing.get(stem(name)) or index.get(base) or index.get(stem(name))
        except IngestError as err:
            summary.sources += 1
            _fail(corpus, summary, IngestError(uri_of(name), str(err)))
            continue
        yield Source(name=name, uri=uri_of(name), read=reader(name), record=dict(record or {}), stamp=stamper(name))


_META_LINE = re.compile(r" line \d+$")


def _hidden(name: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(name).parts)


def _dangling(corpus: Corpus, summary: IngestSummary, link: Path) -> None:
    """A link whose target is missing: named, not skipped (is_file() says False for it)."""
    uri = (link.parent.resolve() / link.name).as_posix()
    summary.merge(failed_source(corpus, uri, f"a link to {link.resolve()}, which does not exist"))
