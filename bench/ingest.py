"""Ingest of the FinanceBench filings inside the page-ranking rows (pages as chunks, metadata
from the document information): pages per second into a local folder and into S3 (SeaweedFS),
the bytes stored, and those bytes over what the row-per-question layout stores for the same
questions (one chunk input with the whole candidate list per question).

Then through the fleet: the rows split into one file per filing (a rows file is one ingest task,
as a PDF is), ingested into S3 by `prism ingest`'s tasks on 1 and then 2 worker processes
(concurrency 1 each, Redis broker), pages per second from the first task sent to the last done.

    python bench/ingest.py
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
from pathlib import Path

from _common import PAGES, SHARED, parser, report

from prism.datasets import load_queries
from prism.ranking.strategies.chunks import prepare
from prism.segmenting import TokenCounter
from producer.ingest import ingest_source
from workers.corpus import CONTENT, Corpus
from workers.store import LocalStore, S3Store

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
SEGMENT_TOKENS = 32_000  # RunConfig's default segment budget: what a run's chunk inputs are cut for
KEYS = ("filings", "pages", "ingest_pages_per_s_local", "corpus_bytes_ratio", "ingest_2w_over_1w")


def row_layout_bytes(rows: Path, counter: TokenCounter) -> tuple[int, int]:
    """Bytes of one runs/<id>/inputs/<query_id>.json per page row: the row-per-question layout (the
    whole candidate list stored once per question), the baseline of stored_bytes_ratio."""
    queries = load_queries(rows)
    total = sum(
        len(prepare(q.question, q.candidates, counter, SEGMENT_TOKENS).model_dump_json(indent=1).encode())
        for q in queries
    )
    return len(queries), total


def ingest(rows: Path, store, counter: TokenCounter) -> dict:
    started = time.perf_counter()
    summary = ingest_source(rows, store, meta=DOC_INFO, counter=counter)
    seconds = time.perf_counter() - started
    again = time.perf_counter()
    rerun = ingest_source(rows, store, meta=DOC_INFO, counter=counter)
    assert rerun.unchanged == summary.ingested and rerun.ingested == 0, rerun
    return {
        "filings": summary.ingested,
        "failed": summary.failed,
        "questions": len(summary.questions),
        "pages": summary.pages,
        "empty_pages": summary.empty_pages,
        "seconds": seconds,
        "rerun_seconds": time.perf_counter() - again,
        "bytes": Corpus(store).stored_bytes(),
        "content_bytes": Corpus(store).stored_bytes(CONTENT),
    }


def by_filing(limit: int | None) -> dict[str, list[str]]:
    """The page rows by filing (the first ``limit`` filings)."""
    found: dict[str, list[str]] = {}
    with gzip.open(PAGES, "rt") as rows:
        for line in rows:
            doc = json.loads(line)["doc_name"] if line.strip() else None
            if doc is not None and (doc in found or limit is None or len(found) < limit):
                found.setdefault(doc, []).append(line)
    return found


def shard_by_filing(folder: Path, by_doc: dict[str, list[str]]) -> int:
    """The page rows, one rows file per filing; the number of files."""
    folder.mkdir(parents=True)
    for doc, lines in by_doc.items():
        (folder / f"{doc}.jsonl.gz").write_bytes(gzip.compress("".join(lines).encode(), mtime=0))
    return len(by_doc)


def fleet_ingest(shards: Path, workdir: Path, s3, bucket: str, workers: int, filings: int) -> dict:
    """`prism ingest` of the shards on ``workers`` celery worker processes; its figures."""
    from _common import redis_db

    from prism.ingest.models import Chunking
    from producer.ingest import ingest
    from workers.settings import load_settings
    from workers.testing import WorkerProcess, fleet_env

    env = fleet_env(redis_db(13), s3.endpoint, None)
    started = [WorkerProcess(env, workdir / f"ingest-{workers}w-{i}.log", concurrency=1) for i in range(workers)]
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        settings = load_settings()
        began = time.perf_counter()
        summary = ingest(str(shards), f"s3://{bucket}/corpus-{workers}w", settings, Chunking(), str(DOC_INFO))
        seconds = time.perf_counter() - began
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for worker in started:
            worker.stop()
    # The only failures allowed are the metadata file's own lines it names (FinanceBench's holds a
    # second record for one filing): every filing of the shards is ingested.
    assert summary.ingested == filings, summary.failures[:3]
    assert all(f.startswith(str(DOC_INFO)) for f in summary.failures), summary.failures[:3]
    return {"pages": summary.pages, "seconds": seconds}


def main() -> None:
    from _common import s3_server

    from workers.testing import s3_client

    quick = parser(__doc__).parse_args().quick
    counter = TokenCounter()
    counter.count("warm the tokenizer")
    filings = by_filing(6 if quick else None)
    with tempfile.TemporaryDirectory() as tmp:
        pages = Path(tmp) / "pages.jsonl.gz"
        pages.write_bytes(gzip.compress("".join(line for lines in filings.values() for line in lines).encode()))
        rows, row_bytes = row_layout_bytes(pages, counter)
        local = ingest(pages, LocalStore(Path(tmp) / "corpus"), counter)
        server = s3_server(Path(tmp) / "s3")
        try:
            client = s3_client(server.endpoint)
            bucket = server.bucket()
            s3 = ingest(pages, S3Store(bucket, "prism", client), counter)
            shards = Path(tmp) / "shards"
            files = shard_by_filing(shards, filings)
            one = fleet_ingest(shards, Path(tmp), server, bucket, 1, len(filings))
            two = fleet_ingest(shards, Path(tmp), server, bucket, 2, len(filings))
        finally:
            server.stop()
    assert local["content_bytes"] == s3["content_bytes"], (local["content_bytes"], s3["content_bytes"])
    report(
        filings=local["filings"],
        questions=local["questions"],
        pages=local["pages"],
        empty_pages=local["empty_pages"],
        failed=local["failed"],
        ingest_pages_per_s_local=local["pages"] / local["seconds"],
        ingest_pages_per_s_s3=s3["pages"] / s3["seconds"],
        rerun_s_local=local["rerun_seconds"],
        rerun_s_s3=s3["rerun_seconds"],
        corpus_bytes=local["bytes"],
        row_layout_rows=rows,
        row_layout_bytes=row_bytes,
        corpus_bytes_ratio=local["bytes"] / row_bytes,
        fleet_files=files,
        ingest_pages_per_s_1w=one["pages"] / one["seconds"],
        ingest_pages_per_s_2w=two["pages"] / two["seconds"],
        ingest_2w_over_1w=one["seconds"] / two["seconds"],
    )


if __name__ == "__main__":
    main()
