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

from _common import PAGES, SHARED, report

from prism.datasets import load_queries
from prism.segmenting import TokenCounter
from prism.strategies.chunks import prepare
from workers.corpus import Corpus, ingest_source
from workers.store import LocalStore, S3Store

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
SEGMENT_TOKENS = 32_000  # RunConfig's default segment budget: what a run's chunk inputs are cut for


def row_layout_bytes(counter: TokenCounter) -> tuple[int, int]:
    """Bytes of one runs/<id>/inputs/<query_id>.json per page row: the row-per-question layout (the
    whole candidate list stored once per question), the baseline of stored_bytes_ratio."""
    queries = load_queries(PAGES)
    total = sum(
        len(prepare(q.question, q.candidates, counter, SEGMENT_TOKENS).model_dump_json(indent=1).encode())
        for q in queries
    )
    return len(queries), total


def ingest(store, counter: TokenCounter) -> dict:
    started = time.perf_counter()
    summary = ingest_source(PAGES, store, meta=DOC_INFO, counter=counter)
    seconds = time.perf_counter() - started
    again = time.perf_counter()
    rerun = ingest_source(PAGES, store, meta=DOC_INFO, counter=counter)
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
    }


def shard_by_filing(folder: Path) -> int:
    """The page rows, one rows file per filing; the number of files."""
    by_doc: dict[str, list[str]] = {}
    with gzip.open(PAGES, "rt") as rows:
        for line in rows:
            if line.strip():
                by_doc.setdefault(json.loads(line)["doc_name"], []).append(line)
    folder.mkdir(parents=True)
    for doc, lines in by_doc.items():
        (folder / f"{doc}.jsonl.gz").write_bytes(gzip.compress("".join(lines).encode(), mtime=0))
    return len(by_doc)


def fleet_ingest(shards: Path, workdir: Path, s3, bucket: str, workers: int) -> dict:
    """`prism ingest` of the shards on ``workers`` celery worker processes; its figures."""
    from _common import redis_db

    from prism.ingest import Chunking
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
    assert summary.failed == 0 and summary.ingested == 74, summary.failures[:3]
    return {"pages": summary.pages, "seconds": seconds}


def main() -> None:
    from workers.testing import SeaweedS3, s3_client

    counter = TokenCounter()
    counter.count("warm the tokenizer")
    rows, row_bytes = row_layout_bytes(counter)
    with tempfile.TemporaryDirectory() as tmp:
        local = ingest(LocalStore(Path(tmp) / "corpus"), counter)
        server = SeaweedS3(Path(tmp) / "s3")
        try:
            client = s3_client(server.endpoint)
            client.create_bucket(Bucket="bench-corpus")
            s3 = ingest(S3Store("bench-corpus", "prism", client), counter)
            shards = Path(tmp) / "shards"
            files = shard_by_filing(shards)
            one = fleet_ingest(shards, Path(tmp), server, "bench-corpus", 1)
            two = fleet_ingest(shards, Path(tmp), server, "bench-corpus", 2)
        finally:
            server.stop()
    assert local["bytes"] == s3["bytes"], (local["bytes"], s3["bytes"])
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
