"""The corpus store: filings kept once per version, content-addressed, in any Store, at its root
(``prism ingest --corpus X`` writes under X).

filings/<filing>/<version>.json.gz   a Filing (gzip JSON), written once
filings/<filing>/head.json           its versions, oldest first, and the latest (a FilingEntry)
catalog/{filings,sources,companies}  the catalogue (workers/catalog.py): Delta Lake tables of the
                                     filings' heads, the sources' fingerprints and failures, and
                                     the company index, appended by each ingest as it goes
inputs/<filing>/<version>-...json    a filing's chunk input for a segment budget (workers/inputs.py)
archives/<digest>.gzidx              a .tar.gz archive's seek points (producer/archives.py)

<filing> is a safe_name() (workers/store.py): a readable part and a hash of the whole. A corpus
written before the catalogue (manifest.json) is read by `prism corpus upgrade` (workers/upgrade.py).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from prism.corpus.view import CorpusView, Versioned
from prism.ingest.extract import IngestError
from prism.ingest.models import Filing, FilingEntry, SourceEntry, VersionEntry
from workers.catalog import Catalog, Pinned, pinned_of
from workers.store import Store, get_model, put_model, safe_name

CONTENT = ("filings/", "inputs/", "archives/")  # the same bytes wherever the corpus is kept
LAYOUT = (*CONTENT, "catalog/")  # the catalogue's logs name their commit times and files
HEAD_READERS = 8  # under boto3's pool of 10 connections per client
Outcome = Literal["ingested", "unchanged", "new_version", "failed"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Corpus:
    """Filings, their versions and the ingest failures, in one Store."""

    def __init__(self, store: Store, version: Pinned = None):
        self.store = store
        self.catalog = Catalog(store, version)

    @classmethod
    def at(cls, store: Store, versions: str) -> Corpus:
        """The corpus as a run pinned it, from the versions its messages carry (pinned_text)."""
        return cls(store, pinned_of(versions))

    @staticmethod
    def filing_key(filing_id: str, version: str) -> str:
        return f"filings/{safe_name(filing_id)}/{version}.json.gz"

    @staticmethod
    def head_key(filing_id: str) -> str:
        return f"filings/{safe_name(filing_id)}/head.json"

    def head(self, filing_id: str) -> FilingEntry | None:
        try:
            return get_model(self.store, self.head_key(filing_id), FilingEntry)
        except KeyError:
            return None

    def heads(self, filing_ids: Iterable[str]) -> dict[str, FilingEntry | None]:
        """Many filings' heads, read HEAD_READERS at a time: an object store's round trips overlap
        (an ingest that finds a thousand files unchanged reads their thousand heads)."""
        ids = list(dict.fromkeys(filing_ids))
        with ThreadPoolExecutor(HEAD_READERS) as pool:
            return dict(zip(ids, pool.map(self.head, ids), strict=True))

    def put_filing(self, filing: Filing) -> Outcome:
        """Store a filing version once: "unchanged" when it is already the latest (its identity
        brought up to date when it was read anew), "new_version" when the filing had another
        latest, else "ingested"."""
        head = self.head(filing.id)
        key = self.filing_key(filing.id, filing.version)
        if head and head.latest == filing.version and self.store.exists(key):
            if head.meta != filing.meta:  # read the same, identified better (an accession found, say)
                head = head.model_copy(update={"meta": filing.meta, "updated_at": _utcnow()})
                put_model(self.store, self.head_key(filing.id), head)
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
            head = FilingEntry(
                id=filing.id, meta=filing.meta, latest=filing.version, versions=[entry], updated_at=entry.ingested_at
            )
            outcome: Outcome = "ingested"
        else:
            # A filing changed back to an earlier version keeps its first record, now latest again.
            versions = [v for v in head.versions if v.version != filing.version] + [
                next((v for v in head.versions if v.version == filing.version), entry)
            ]
            changed = {"meta": filing.meta, "latest": filing.version, "versions": versions, "updated_at": _utcnow()}
            head = head.model_copy(update=changed)
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

    def view(self) -> CorpusView:
        """What planning reads, at the versions the corpus was opened at: the company index, and
        the filings of a scope's companies when asked (an unscoped question streams them all)."""
        catalog = self.catalog

        def load(companies: Sequence[str]) -> list[Versioned]:
            return [(h.id, h.meta, h.latest) for h in catalog.filings_of(companies).values()]

        return CorpusView(catalog.companies(), load, lambda: ((h.id, h.meta, h.latest) for h in catalog.filings()))

    def checkpoint(self, since: IngestSummary) -> None:
        """What an ingest did since its last checkpoint, appended to the catalogue: the heads of
        the filings it stored, its sources done and failed. An ingest cut short loses at most
        what it did since; the next one reads those sources again."""
        failed, cleared = self._news(since)
        self.catalog.append(since.heads, since.done_sources, failed, cleared, since.failed_as)

    def _news(self, since: IngestSummary) -> tuple[dict[str, str], list[str]]:
        """The failures and clearings that change what the catalogue says: a failure it holds
        already (the same reason, of the file as it is now) is not appended again, nor the
        clearing of a source that has no failure, so a night with nothing new writes nothing."""
        asked = [*since.failed_sources, *since.cleared]
        held = self.catalog.sources(asked) if asked else {}

        def known(source: str, reason: str) -> bool:
            row = held.get(source)
            return (
                row is not None
                and row.state == "failed"
                and row.reason == reason
                and (row.fingerprint or "") == since.failed_as.get(source, "")
            )

        failed = {s: why for s, why in since.failed_sources.items() if not known(s, why)}
        cleared = [s for s in since.cleared if (row := held.get(s)) is not None and row.state == "failed"]
        return failed, cleared

    def stored_bytes(self, prefixes: tuple[str, ...] = LAYOUT) -> int:
        """The corpus's own objects only (the folder may hold other things): all of them, or
        those under ``prefixes``."""
        return sum(len(self.store.get(k)) for prefix in prefixes for k in self.store.keys(prefix))


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
    failed_as: dict[str, str] = {}  # source -> the fingerprint of the file it read and could make no filing of
    guessed: dict[str, str] = {}  # filing id -> its identity fields read from the cover or the file name
    done_sources: dict[str, SourceEntry] = {}  # source -> its fingerprint and the filings it gave
    cleared: list[str] = []  # sources whose failure no longer holds (a metadata file's line read again)

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
        self.failed_as.update(other.failed_as)
        self.guessed.update(other.guessed)
        self.done_sources.update(other.done_sources)
        self.cleared.extend(other.cleared)


def failed_source(uri: str, reason: str) -> IngestSummary:
    """A source that gave no filing: a summary that counts it (the catalogue keeps it)."""
    return IngestSummary(sources=1, failed=1, failures=[f"{uri}: {reason}"], failed_sources={uri: reason})


def record_failure(summary: IngestSummary, err: IngestError) -> None:
    """A failure that is not a source of its own (a metadata line, a rows file's row): counted."""
    summary.failed += 1
    summary.failures.append(str(err))
    summary.failed_sources[err.source] = err.reason
