"""The corpus store: filings kept once per version, content-addressed, in any Store, at its root
(``prism ingest --corpus X`` writes X/manifest.json).

filings/<filing>/<version>.json.gz   a Filing (gzip JSON), written once
filings/<filing>/head.json           its versions, oldest first, and the latest (a FilingEntry)
failures/<source>.json               a source that gave no filing, and why (an IngestFailure)
manifest.json                        every filing's versions, every failure, every source file's
                                     fingerprint (a CorpusManifest), updated by each ingest
versions/<digest>.json               every filing's latest version, one per corpus state
inputs/<filing>/<version>-...json    a filing's chunk input for a segment budget (workers/inputs.py)

<filing> and <source> are safe_name()s (workers/store.py): a readable part and a hash of the whole.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from prism.ingest.extract import IngestError
from prism.ingest.models import CorpusManifest, Filing, FilingEntry, IngestFailure, SourceEntry, VersionEntry
from workers.store import Store, get_model, put_model, safe_name

JOURNAL = "journal/"  # an ingest's checkpoints, folded into the manifest when it ends
LAYOUT = ("filings/", "failures/", "versions/", "inputs/", "archives/", JOURNAL)  # and manifest.json
Outcome = Literal["ingested", "unchanged", "new_version", "failed"]


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
        """Store a filing version once: "unchanged" when it is already the latest (its identity
        brought up to date when it was read anew), "new_version" when the filing had another
        latest, else "ingested"."""
        head = self.head(filing.id)
        key = self.filing_key(filing.id, filing.version)
        if head and head.latest == filing.version and self.store.exists(key):
            if head.meta != filing.meta:  # read the same, identified better (an accession found, say)
                put_model(self.store, self.head_key(filing.id), head.model_copy(update={"meta": filing.meta}))
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
        tasks are done); its checkpoints are then folded in. Nothing is listed but the
        checkpoints: the cost follows the change, not the corpus."""
        manifest = self._apply(manifest, summary)
        put_model(self.store, self.manifest_key, manifest)
        for key in list(self.store.keys(JOURNAL)):
            self.store.delete(key)
        return manifest

    def checkpoint(self, since: IngestSummary) -> None:
        """What an ingest did since its last checkpoint, kept as one small record (the manifest
        is not rewritten): an ingest cut short is read back from these by the next one. The
        sources alone: their filings' heads are stored already, and read back only then."""
        if since.done_sources or since.failed_sources:
            part = Journal(done_sources=since.done_sources, failed_sources=since.failed_sources)
            self.store.put(f"{JOURNAL}{time.time_ns()}-{uuid.uuid4().hex[:8]}.json", part.model_dump_json().encode())

    def recovered(self) -> CorpusManifest:
        """The manifest with the checkpoints of an ingest that did not end folded in, each done
        source's filings as their stored heads have them."""
        manifest = self.manifest()
        for key in sorted(self.store.keys(JOURNAL)):
            part = get_model(self.store, key, Journal)
            ids = {fid for entry in part.done_sources.values() for fid in entry.filings}
            heads = {fid: head for fid in sorted(ids) if (head := self.head(fid)) is not None}
            done = IngestSummary(done_sources=part.done_sources, failed_sources=part.failed_sources, heads=heads)
            manifest = self._apply(manifest, done)
        return manifest

    def _apply(self, manifest: CorpusManifest, summary: IngestSummary) -> CorpusManifest:
        at = _utcnow()
        for source, reason in summary.failed_sources.items():
            manifest.failures[source] = IngestFailure(source=source, reason=reason, at=at)
            manifest.sources.pop(source, None)
        for source, entry in summary.done_sources.items():
            manifest.failures.pop(source, None)
            manifest.sources[source] = entry
        manifest.filings.update(summary.heads)  # as each filing's ingest left it: no head is read here
        manifest.filings = dict(sorted(manifest.filings.items()))
        manifest.failures = dict(sorted(manifest.failures.items()))
        manifest.sources = dict(sorted(manifest.sources.items()))
        manifest.written_at = at
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

    def stored_bytes(self) -> int:
        """The corpus's own objects only: the folder may hold other things."""
        keys = [k for prefix in LAYOUT for k in self.store.keys(prefix)]
        if self.store.exists(self.manifest_key):
            keys.append(self.manifest_key)
        return sum(len(self.store.get(k)) for k in keys)


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
    left_out: int = 0  # archive members the filter (--forms, --ciks, --index, --question-set) did not take
    opened: int = 0  # archive members read past their header (by an ingest task)
    filings: dict[str, str] = {}  # filing id -> its latest version
    heads: dict[str, FilingEntry] = {}  # the heads of the filings read (their versions and identity), for the manifest
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
        for name in (
            "sources",
            "ingested",
            "unchanged",
            "new_versions",
            "failed",
            "pages",
            "empty_pages",
            "skipped",
            "left_out",
            "opened",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.chunks += other.chunks
        self.tokens += other.tokens
        self.filings.update(other.filings)
        self.heads.update(other.heads)
        self.questions.update(other.questions)
        self.failures.extend(other.failures)
        self.failed_sources.update(other.failed_sources)
        self.guessed.update(other.guessed)
        self.done_sources.update(other.done_sources)


class Journal(BaseModel):
    """One checkpoint of an ingest: what it did since the one before."""

    done_sources: dict[str, SourceEntry] = {}
    failed_sources: dict[str, str] = {}


def failed_source(corpus: Corpus, uri: str, reason: str) -> IngestSummary:
    """A source that gave no filing: its failure stored, and a summary that counts it."""
    corpus.put_failure(uri, reason)
    return IngestSummary(sources=1, failed=1, failures=[f"{uri}: {reason}"], failed_sources={uri: reason})


def record_failure(corpus: Corpus, summary: IngestSummary, err: IngestError) -> None:
    """A failure that is not a source of its own (a metadata line, a rows file's row): stored, counted."""
    corpus.put_failure(err.source, err.reason)
    summary.failed += 1
    summary.failures.append(str(err))
    summary.failed_sources[err.source] = err.reason
