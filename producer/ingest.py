"""`prism ingest`: the filings of a source into a corpus. The producer finds the sources
(producer/sources.py), leaves out those unchanged since they were last ingested, and sends one
ingest task per source to the fleet (or ingests them in this process when no broker is
configured); the corpus manifest is written once, when they are all done."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from celery import Celery
from celery.result import ResultSet

from prism.ingest.filings import filing_id_of, source_kind
from prism.ingest.identity import IDENTITY_FORMAT
from prism.ingest.models import Chunking, CorpusManifest
from prism.options import RunOptions
from prism.segmenting import TokenCounter
from producer.sources import Source, Walk, accessions
from workers.app import make_app, reach_broker
from workers.corpus import Corpus, IngestSummary, failed_source
from workers.embedded import embedded_worker
from workers.ingesting import ingest_file
from workers.messages import IngestJob, TaskName
from workers.settings import Settings
from workers.store import Store, open_store

POLL_S = 0.05  # one bulk read of the result backend per poll: cheap, and a small re-ingest ends sooner
Dispatch = Callable[[list[Source]], Iterable[IngestSummary]]
DEFAULT_SEGMENT_TOKENS = RunOptions.model_fields["segment_tokens"].default
_META_LINE = re.compile(r" line \d+$")


def ingest(
    source: str,
    corpus: str,
    settings: Settings,
    chunking: Chunking,
    meta: str | None = None,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    on_note: Callable[[str], None] = lambda text: None,
) -> IngestSummary:
    """Every filing file of ``source`` into the corpus, one fleet task per file; each filing's
    chunk input for the configured segment budget is stored with it."""
    target = open_store(corpus, settings)
    origin = open_store(source, settings) if source.startswith("s3://") else source
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
            )
            for item in items
        ]
        yield from _run(app, jobs, settings.stall_s, on_progress, on_note)

    with embedded_worker(app, settings.embedded_workers) if settings.embedded else nullcontext():
        return ingest_source(origin, target, chunking, meta, dispatch=dispatch, segment_tokens=settings.segment_tokens)


def ingest_source(
    source: str | Path | Sequence[str | Path] | Store,
    store: Store,
    chunking: Chunking | None = None,
    meta: str | Path | None = None,
    counter: TokenCounter | None = None,
    dispatch: Dispatch | None = None,
    segment_tokens: int = DEFAULT_SEGMENT_TOKENS,
) -> IngestSummary:
    """Every filing under a folder (or a file, a list of files, or every key of a Store) into the
    corpus in ``store``; the manifest is written at the end. ``dispatch`` ingests the sources
    elsewhere (the fleet: one task per source) and gives each one's summary as it ends; without
    it they are ingested here, one at a time."""
    started = time.perf_counter()
    chunking = chunking or Chunking()
    corpus, summary = Corpus(store), IngestSummary()
    given = (str(meta), Path(meta).read_bytes()) if meta is not None else None
    walk = Walk(corpus, summary, given)
    manifest = corpus.manifest()
    settled = _digest([chunking.model_dump(), hashlib.sha256(given[1]).hexdigest() if given else None, IDENTITY_FORMAT])
    items = _to_read(accessions(list(walk.sources(source))), manifest, settled, corpus, summary)
    local = Local(corpus, chunking, counter, walk.index, segment_tokens)
    for part in (dispatch or local)(items):
        summary.merge(part)
    for failed in list(manifest.failures):  # a metadata file read again: what it no longer says is gone
        if _META_LINE.sub("", failed) in walk.read_meta and failed not in summary.failed_sources:
            del manifest.failures[failed]
            corpus.clear_failure(failed)
    corpus.update_manifest(manifest, summary)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


def _to_read(
    found: list[Source], manifest: CorpusManifest, settled: str, corpus: Corpus, summary: IngestSummary
) -> list[Source]:
    """The sources to send, with their fingerprints: not those unchanged since they were last
    ingested (counted as such), nor a second file that would be a filing already taken (failed)."""
    items: list[Source] = []
    taken: dict[str, str] = {}
    for item in found:
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
    return items


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
            except (OSError, KeyError) as err:
                yield failed_source(self.corpus, item.uri, f"cannot be read ({err})")
                continue
            yield ingest_file(
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


def _run(
    app: Celery,
    jobs: list[IngestJob],
    quiet_s: float,
    on_progress: Callable[[int, int], None],
    on_note: Callable[[str], None],
) -> list[IngestSummary]:
    """Send every job, then collect each file's summary as its task ends (one bulk read of the
    result backend per poll, however many are pending). Says so once when none ends for a while."""
    results = ResultSet(
        [app.send_task(TaskName.INGEST_FILE, args=[job.model_dump(mode="json")]) for job in jobs], app=app
    )
    source_of = {result.id: job.uri for result, job in zip(results.results, jobs)}
    summaries: list[IngestSummary] = []
    on_progress(0, len(jobs))
    moved, said = time.monotonic(), False

    def arrived(task_id: str, value: object) -> None:
        nonlocal moved
        moved = time.monotonic()
        if isinstance(value, BaseException):  # the task base stores every failure; this is the broker's
            failure = f"{source_of[task_id]}: {type(value).__name__}: {value}"
            reason = f"{type(value).__name__}: {value}"
            summaries.append(
                IngestSummary(sources=1, failed=1, failures=[failure], failed_sources={source_of[task_id]: reason})
            )
        else:
            summaries.append(IngestSummary.model_validate(value))
        on_progress(len(summaries), len(jobs))

    def waiting() -> None:
        nonlocal said
        if not said and time.monotonic() - moved > quiet_s:
            said = True
            on_note(
                f"no ingest task has ended for {quiet_s:.0f} s (PRISM_STALL_S): are workers running (celery -A workers.app worker)?"
            )

    # the embedded worker runs in this process: the join waits on results that are not its own subtasks
    results.join_native(
        propagate=False, interval=POLL_S, callback=arrived, on_interval=waiting, disable_sync_subtasks=False
    )
    results.forget()
    return summaries
