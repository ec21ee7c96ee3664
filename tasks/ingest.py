"""The ingest task: one source file (with the other files of its accession) into a corpus. Whatever raises, the file ends with one
stored outcome: its filings, or a failure in the corpus saying why."""

from __future__ import annotations

import random
from typing import Any

import structlog
from botocore.exceptions import ClientError
from celery import Task, shared_task
from celery.exceptions import Retry

from prism.ingest.archives import ArchiveError
from prism.ingest.meta import parse_meta_jsonl
from tasks.base import MAX_TRANSIENT_RETRIES, TRANSIENT, _text
from workers import runtime
from workers.corpus import Corpus, failed_source
from workers.ingesting import ingest_file, read_archived
from workers.messages import IngestJob, TaskName
from workers.store import open_input

log = structlog.get_logger("prism")


class IngestTask(Task):
    abstract = True
    max_retries = None  # retried while the store is away, up to MAX_TRANSIENT_RETRIES

    def __call__(self, message: dict) -> Any:
        job = IngestJob.model_validate(message)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(task=self.name, source=job.uri, attempt=self.request.retries + 1)
        try:
            return self.run(message)
        except Retry:
            raise
        except TRANSIENT as err:
            if self.request.retries < MAX_TRANSIENT_RETRIES:
                countdown = min(60.0, 2.0**self.request.retries) * random.uniform(0.5, 1.0)
                raise self.retry(countdown=countdown) from None
            reason = f"gave up after {self.request.retries} retries: {_text(err)}"
        except Exception as err:  # noqa: BLE001 - every source ends in a stored outcome
            reason = _text(err)
        log.warning("ingest failed", error=reason)
        return failed_source(job.uri, reason).model_dump(mode="json")


@shared_task(bind=True, base=IngestTask, name=TaskName.INGEST_FILE)
def ingest_filing(self: IngestTask, message: dict) -> dict:
    job = IngestJob.model_validate(message)
    rt = runtime.of(self.app)
    corpus = Corpus(rt.store(job.corpus))
    try:
        if job.member is not None:
            data = read_archived(corpus, job.member, rt.settings)
        else:
            with open_input(job.uri, rt.settings) as stream:
                data = stream.read()
        exhibits = []
        for uri, doc_type in job.exhibits:
            with open_input(uri, rt.settings) as stream:
                exhibits.append((uri, stream.read(), doc_type))
    except ArchiveError as err:
        return failed_source(job.uri, str(err)).model_dump(mode="json")
    except (OSError, ClientError, KeyError) as err:
        return failed_source(job.uri, f"cannot be read ({err})").model_dump(mode="json")
    index: dict[str, dict[str, Any]] = {}
    if job.meta is not None:
        with open_input(job.meta, rt.settings) as stream:
            index, _ = parse_meta_jsonl(stream.read(), job.meta)  # its errors were stored by the producer
    counter = rt.counter(job.chunking.encoding)
    summary = ingest_file(
        corpus,
        job.name,
        job.uri,
        data,
        job.record,
        job.chunking,
        counter,
        index,
        job.segment_tokens,
        job.fingerprint,
        exhibits,
    )
    summary.opened = int(job.member is not None)
    return summary.model_dump(mode="json")
