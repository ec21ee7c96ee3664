"""`prism ingest`: the filings of a source into a corpus. The producer finds the sources
(producer/sources.py), leaves out those unchanged since they were last ingested, and sends one
ingest task per source to the fleet (or ingests them in this process when no broker is
configured); what they did is appended to the corpus's catalogue as they go."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from celery import Celery

from prism.ingest.archives import ArchiveError
from prism.ingest.filings import filing_id_of, source_kind
from prism.ingest.identity import IDENTITY_FORMAT
from prism.ingest.models import Chunking, FilingEntry
from prism.options import RunOptions
from prism.segmenting import TokenCounter
from producer.archives import Filter, Listed, expand, settle
from producer.collect import run_tasks
from producer.sources import Keys, Source, Walk, accessions
from workers.app import make_app, reach_broker
from workers.catalog import SourceRow
from workers.corpus import Corpus, IngestSummary, failed_source
from workers.embedded import embedded_worker
from workers.ingesting import ingest_file
from workers.messages import IngestJob, TaskName
from workers.settings import Settings, named
from workers.store import Store, open_store
from workers.upgrade import upgrade

Dispatch = Callable[[list[Source]], Iterable[IngestSummary]]
_META_LINE = re.compile(r" line \d+$")
DEFAULT_SEGMENT_TOKENS = RunOptions.model_fields["segment_tokens"].default


def ingest(
    source: str,
    corpus: str,
    settings: Settings,
    chunking: Chunking,
    meta: str | None = None,
    chosen: Filter = Filter(),
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    on_note: Callable[[str], None] = lambda text: None,
) -> IngestSummary:
    """Every filing file of ``source`` into the corpus, one fleet task per file; each filing's
    chunk input for the configured segment budget is stored with it."""
    target = open_store(corpus, settings)
    origin: str | Keys = source
    if source.startswith("s3://"):  # a prefix ending in '/', or one object (an archive) or folder
        parent, _, name = source.rstrip("/").rpartition("/") if not source.endswith("/") else (source, "", "")
        origin = Keys(open_store(parent, settings), name)
    app = make_app(settings, tasks=("tasks.ingest",))
    if not settings.embedded:
        reach_broker(app)

    def dispatch(items: list[Source]) -> Iterator[IngestSummary]:
        jobs = [
            IngestJob(
                corpus=target.uri,
                name=item.name,
                uri=item.uri,
                record=item.record,
                chunking=chunking,
                meta=meta,
                segment_tokens=settings.segment_tokens,
                fingerprint=item.fingerprint,
                exhibits=[(e.uri, e.type) for e in item.exhibits],
                member=item.member,
            )
            for item in items
        ]
        yield from _run(app, jobs, settings.stall_s, on_progress, on_note)

    with embedded_worker(app, settings.embedded_workers) if settings.embedded else nullcontext():
        return ingest_source(
            origin,
            target,
            chunking,
            meta,
            dispatch=dispatch,
            segment_tokens=settings.segment_tokens,
            chosen=chosen,
            checkpoint_s=settings.ingest_checkpoint_s,
        )


def ingest_source(
    source: str | Path | Sequence[str | Path] | Store | Keys,
    store: Store,
    chunking: Chunking | None = None,
    meta: str | Path | None = None,
    counter: TokenCounter | None = None,
    dispatch: Dispatch | None = None,
    segment_tokens: int = DEFAULT_SEGMENT_TOKENS,
    chosen: Filter = Filter(),
    checkpoint_s: float = 30.0,
) -> IngestSummary:
    """Every filing under a folder (or a file, a list of files, or every key of a Store) into the
    corpus in ``store``; the catalogue is appended as they end. ``dispatch`` ingests the sources
    elsewhere (the fleet: one task per source) and gives each one's summary as it ends; without
    it they are ingested here, one at a time. Archives are listed here and their members sent
    one a task, as ``chosen`` takes them. What is done is checkpointed every ``checkpoint_s``, so an
    ingest cut short sends only what it had not done when it is run again."""
    started = time.perf_counter()
    chunking = chunking or Chunking()
    corpus, summary = Corpus(store), IngestSummary()
    upgrade(corpus)  # a corpus from before the catalogue, converted once
    given = (str(meta), Path(meta).read_bytes()) if meta is not None else None
    walk = Walk(corpus, summary, given)
    settled = _digest([chunking.model_dump(), hashlib.sha256(given[1]).hexdigest() if given else None, IDENTITY_FORMAT])
    listed: list[Listed] = []
    reading = Reading(settled, corpus, summary, chosen, listed)
    items = reading.to_read(accessions(list(walk.sources(source))))
    local = Local(corpus, chunking, counter, walk.index, segment_tokens)
    checkpoint, since = time.monotonic(), IngestSummary()
    since.merge(summary)  # the failures found while listing
    try:
        for part in (dispatch or local)(items):
            summary.merge(part)
            since.merge(part)
            if time.monotonic() - checkpoint > checkpoint_s:
                corpus.checkpoint(since)
                checkpoint, since = time.monotonic(), IngestSummary()
    except KeyboardInterrupt:
        corpus.checkpoint(since)  # what was done stays done
        raise
    for uri, entry in settle(listed, summary).items():
        since.done_sources = {s: e for s, e in since.done_sources.items() if not s.startswith(f"{uri}#")}
        since.done_sources[uri] = entry
    for meta_file in walk.read_meta:  # a metadata file read again: what it no longer says is gone
        failed = corpus.catalog.failures(under=meta_file)
        since.cleared += [s for s in failed if _META_LINE.sub("", s) == meta_file and s not in summary.failed_sources]
    corpus.checkpoint(since)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


@dataclass
class Reading:
    """Which sources an ingest sends, with their fingerprints: not those unchanged since they
    were last ingested (counted as such) or since they failed (named as failed again), nor a
    second file that would be a filing already taken (failed); an archive is listed (unless it
    is unchanged) and its members taken as sources. The catalogue is asked about the listed
    sources alone."""

    settled: str
    corpus: Corpus
    summary: IngestSummary
    chosen: Filter
    listed: list[Listed]
    heads: dict[str, FilingEntry | None] = field(default_factory=dict)  # of the filings ingested sources made

    def to_read(self, found: list[Source]) -> list[Source]:
        items: list[Source] = []
        taken: dict[str, str] = {}
        known = self.corpus.catalog.sources([item.uri for item in found])
        self._read_heads(known)
        for item in found:
            sources, known_members = self._sources(item, known)
            for source in sources:
                if source_kind(source.name) != "rows" and not self._first(source, taken):
                    continue
                fingerprint = _fingerprint(source, self.settled)
                row = known_members.get(source.uri, known.get(source.uri))
                if fingerprint and _unchanged(self.heads, row, fingerprint, self.summary):
                    continue
                if fingerprint and _failed_as_it_is(row, fingerprint, self.summary):
                    continue
                items.append(replace(source, fingerprint=fingerprint))
        return items

    def _sources(self, item: Source, known: dict[str, SourceRow]) -> tuple[list[Source], dict[str, SourceRow]]:
        """A source as itself, or an archive's members that are to be read (and what the
        catalogue holds of them)."""
        if item.open is None:
            return [item], {}
        fingerprint = _fingerprint(item, _digest([self.settled, self.chosen.key]))
        if fingerprint and _unchanged(self.heads, known.get(item.uri), fingerprint, self.summary):
            return [], {}
        members, listed = expand(item, fingerprint, self.chosen, self.corpus, self.summary)
        self.listed.append(listed)
        member_rows = self.corpus.catalog.sources(listed.members)
        self._read_heads(member_rows)
        listed.known = {uri: row.entry for uri, row in member_rows.items() if row.state == "done" and row.entry}
        return members, member_rows

    def _read_heads(self, known: dict[str, SourceRow]) -> None:
        """The heads of the filings the catalogue's ingested sources made, all read at once: a
        source found unchanged is confirmed against them."""
        done = [row.entry for row in known.values() if row.state == "done" and row.entry]
        self.heads |= self.corpus.heads(fid for entry in done for fid in entry.filings if fid not in self.heads)

    def _first(self, item: Source, taken: dict[str, str]) -> bool:
        """Two files that would be one filing: the second fails."""
        fid = filing_id_of(item.uri, item.record)
        if taken.setdefault(fid, item.uri) == item.uri:
            return True
        reason = f"filing id '{fid}' is taken by {taken[fid]}; give an id in its metadata"
        self.summary.merge(failed_source(item.uri, reason))
        return False


@dataclass
class Local:
    """Sources ingested in this process, one at a time (no fleet: tests, tools, benchmarks)."""

    corpus: Corpus
    chunking: Chunking
    counter: TokenCounter | None
    index: dict[str, dict[str, Any]]
    segment_tokens: int

    def __call__(self, items: list[Source]) -> Iterator[IngestSummary]:
        counter = self.counter
        for item in items:
            counter = counter or TokenCounter(self.chunking.encoding)  # loaded only when something is read
            try:
                data = item.read()
                exhibits = [(e.uri, e.read(), e.type) for e in item.exhibits]
            except ArchiveError as err:
                yield failed_source(item.uri, str(err))
                continue
            except (OSError, KeyError) as err:
                yield failed_source(item.uri, f"cannot be read ({err})")
                continue
            summary = ingest_file(
                self.corpus,
                item.name,
                item.uri,
                data,
                item.record,
                self.chunking,
                counter,
                self.index,
                self.segment_tokens,
                fingerprint=item.fingerprint,
                exhibits=exhibits,
            )
            summary.opened = int(item.member is not None)
            yield summary


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


def _unchanged(
    heads: dict[str, FilingEntry | None], row: SourceRow | None, fingerprint: str, summary: IngestSummary
) -> bool:
    """Count a source whose fingerprint and filings are as the catalogue holds them; no task is
    sent for it. Its filings' versions were confirmed by their content digest when it was last
    ingested; a touched file (new fingerprint) is read and confirmed again."""
    entry = row.entry if row is not None and row.state == "done" else None
    if entry is None or entry.fingerprint != fingerprint:
        return False
    found = [heads.get(fid) for fid in entry.filings]
    if any(h is None or h.latest != entry.filings[h.id] for h in found):
        return False
    summary.sources += 1
    summary.skipped += 1
    summary.left_out += entry.left_out
    for head in found:
        assert head is not None
        summary.count("unchanged", next(v for v in head.versions if v.version == head.latest))
        summary.filings[head.id] = head.latest
    return True


def _failed_as_it_is(row: SourceRow | None, fingerprint: str, summary: IngestSummary) -> bool:
    """A file that gave no filing and is unchanged since (its fingerprint as it failed): it is
    not read, and its failure, already in the catalogue, is named again but not recorded again."""
    if row is None or row.state != "failed" or row.fingerprint != fingerprint:
        return False
    summary.sources += 1
    summary.skipped += 1
    summary.failed += 1
    when = f" on {row.at:%Y-%m-%d}" if row.at is not None else ""
    summary.failures.append(f"{row.source}: {row.reason} (unchanged since it failed{when}: not read again)")
    return True


def _run(
    app: Celery,
    jobs: list[IngestJob],
    quiet_s: float,
    on_progress: Callable[[int, int], None],
    on_note: Callable[[str], None],
) -> Iterator[IngestSummary]:
    """Each file's summary as its task ends."""
    stalled = f"no ingest task has ended for {quiet_s:.0f} s ({named('stall_s')}): are workers running (celery -A workers.app worker)?"
    for job, value in run_tasks(app, TaskName.INGEST_FILE, jobs, quiet_s, on_progress, lambda: on_note(stalled)):
        yield _summary_of(job.uri, value)


def _summary_of(uri: str, value: object) -> IngestSummary:
    """A task's summary, or the broker's failure of it (the task base stores every other one)."""
    if not isinstance(value, BaseException):
        return IngestSummary.model_validate(value)
    reason = f"{type(value).__name__}: {value}"
    return IngestSummary(sources=1, failed=1, failures=[f"{uri}: {reason}"], failed_sources={uri: reason})
