"""Read the input, check every row, and enqueue one job per valid query that still needs one:
a document row's ranking, a chunk row's planning task (tasks/planning.py makes its input and
fans out its segments on the fleet). A chunk row's candidates are stored once per distinct list
(questions over one filing share it); the question travels in the job message.

A query whose result this run already holds is skipped (rerun, resume); one that an earlier run
ranked with the same job id (same input, same config) is copied over instead of ranked again
(nightly incremental runs). Inputs stream row by row, file by file, so a corpus of any size
plans in flat memory; the plan and the qrels are spooled to disk and stored at the end.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from urllib.parse import urlparse

from celery import Celery

from prism.corpus.view import digest
from prism.datasets import InputFileError, RowError, RowWarning, read_input
from prism.models import Query, job_id
from producer.inputs import invalid_failure
from producer.spec import RunSpec
from workers.app import send
from workers.ledger import Ledger, has_outcome, outcome_keys
from workers.messages import ChunkJob, DocumentJob, Job, Priority, TaskName
from workers.runfiles import Outcome, RunFiles, RunLayout
from workers.settings import Settings
from workers.store import open_input, s3_client

INPUT_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")


@dataclass
class Plan:
    documents: int = 0
    chunks: int = 0
    invalid_rows: int = 0
    already_done: int = 0  # this run held their outcome already
    kept_failures: int = 0  # of those, failures: kept until `prism resume --failed`
    reused: int = 0  # copied from an earlier run with the same job id
    not_enqueued: int = 0  # left pending: the run's budget was spent while planning
    warnings: int = 0  # rows that run, with something said about them (warnings.jsonl)
    said: list[str] = field(default_factory=list)  # the first warnings, to print
    changes: dict | None = None  # a `--new` run: what changed since the run it starts from
    questions: int = 0  # a question set: questions enqueued for planning on the fleet
    corpus_version: int | None = None  # a question set: the catalogue version it was planned against
    corpus_versions: dict[str, int] = field(default_factory=dict)  # and each table's that planning reads
    corpus_at: datetime | None = None  # and the time of its newest row
    seconds: float = 0.0
    progress_base: int = 0  # outcomes counted before planning began (jobs may end while it runs)

    def counts(self) -> dict[str, int]:
        return {
            "documents": self.documents,
            "chunks": self.chunks,
            "invalid_rows": self.invalid_rows,
        } | ({"questions": self.questions} if self.questions else {})

    @property
    def queries(self) -> int:
        return self.documents + self.chunks

    @property
    def enqueued(self) -> int:
        return self.queries - self.already_done - self.reused - self.not_enqueued


def input_files(uri: str, settings: Settings) -> list[str]:
    """The input itself, or every JSONL file under a folder or an s3:// prefix ending in '/'."""
    if uri.startswith("s3://"):
        if not uri.endswith("/"):
            return [uri]
        parsed = urlparse(uri)
        pages = (
            s3_client(settings)
            .get_paginator("list_objects_v2")
            .paginate(Bucket=parsed.netloc, Prefix=parsed.path.lstrip("/"))
        )
        keys = [
            o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].lower().endswith(INPUT_SUFFIXES)
        ]
        return [f"s3://{parsed.netloc}/{key}" for key in sorted(keys)]
    path = Path(uri)
    if path.is_dir():
        return [str(p) for p in sorted(path.rglob("*")) if p.name.lower().endswith(INPUT_SUFFIXES) and p.is_file()]
    return [uri]


def _rows(files: list[str], settings: Settings) -> Iterator[tuple[str, Query | RowError | RowWarning | InputFileError]]:
    """Every file's items; a file that cannot be read ends its own items, not the run."""
    for uri in files:
        try:
            for item in read_input(uri, partial(open_input, uri, settings)):
                yield uri, item
        except InputFileError as err:
            yield uri, err


def plan_run(
    app: Celery,
    spec: RunSpec,
    ledger: Ledger,
    settings: Settings,
    budget_spent: Callable[[], bool] = lambda: False,
    on_query: Callable[[Plan], None] = lambda plan: None,
) -> Plan:
    """Enqueue a job for every valid query without an outcome in this run; the plan, the qrels and
    the warnings spooled to disk as they come and stored once planning ends."""
    started = time.monotonic()
    plan = Plan()
    context = _Rows(app, spec, ledger, outcome_keys(ledger.store, spec.run_id), budget_spent)
    with _Spools() as spools:
        for source, item in _rows(input_files(spec.input, settings), settings):
            if isinstance(item, RowWarning):  # the row still runs; the warning is kept with the run
                plan.warnings += 1
                spools.write("warnings", {"source": source, "line": item.line, "field": item.field} | _said(item))
                continue
            if (query := context.valid(source, item, plan)) is None:
                continue
            if query.qrel:
                spools.write("qrels", {"query_id": query.id, "qrel": query.qrel, "answer": query.answer})
            state = _plan_query(query, source, context, plan)
            spools.write(
                "plan", {"query_id": query.id, "task": query.task, "line": query.line, "source": source, "state": state}
            )
            on_query(plan)
            if spec.config.limit and plan.queries >= spec.config.limit:
                break
        files = RunFiles(ledger.store, spec.run_id)
        files.put_plan(spools.read("plan"))
        files.put_qrels(spools.read("qrels"))
        files.put_warnings(spools.read("warnings"))
    plan.seconds = round(time.monotonic() - started, 3)
    return plan


def _said(item: RowWarning) -> dict:
    return {"message": item.message, "query_id": item.query_id}


class _Spools:
    """JSONL rows spooled to temporary files, so a corpus of any size plans in flat memory."""

    def __enter__(self) -> _Spools:
        self.files = {name: tempfile.TemporaryFile() for name in ("plan", "qrels", "warnings")}
        return self

    def write(self, name: str, row: dict) -> None:
        self.files[name].write(json.dumps(row).encode() + b"\n")

    def read(self, name: str) -> Iterator[dict]:
        spool = self.files[name]
        spool.seek(0)
        return (json.loads(line) for line in spool)

    def __exit__(self, *exc: object) -> None:
        for spool in self.files.values():
            spool.close()


@dataclass(frozen=True)
class _Rows:
    """What planning a rows input keeps from row to row."""

    app: Celery
    spec: RunSpec
    ledger: Ledger
    listed: set[str]  # the outcomes the run held when planning began
    budget_spent: Callable[[], bool]
    stored: set[str] = field(default_factory=set)  # the candidate lists stored so far
    first_line: dict[str, str] = field(default_factory=dict)  # each query id's first line

    def valid(self, source: str, item: Query | RowError | InputFileError, plan: Plan) -> Query | None:
        """The query of a row, or None for a bad row or file (stored as an input failure); a
        second row with a query id seen before is a bad row."""
        if isinstance(item, Query) and item.id in self.first_line:
            message = f"duplicate query id {item.id!r} (first on {self.first_line[item.id]})"
            item = RowError(item.line, "id", message, item.id)
        if not isinstance(item, Query):
            plan.invalid_rows += 1
            line = item.line if isinstance(item, RowError) else -1  # -1: the file itself
            self.ledger.invalid(invalid_failure(self.spec.run_id, source, item), source, line)
            return None
        self.first_line[item.id] = f"{source} line {item.line}"
        return item


def _plan_query(q: Query, source: str, context: _Rows, plan: Plan) -> str:
    spec, ledger, layout = context.spec, context.ledger, RunLayout(context.spec.run_id)
    if q.task == "documents":
        plan.documents += 1
    else:
        plan.chunks += 1
    if has_outcome(context.listed, spec.run_id, q.task, q.id):
        plan.already_done += 1
        plan.kept_failures += layout.outcome(Outcome.FAILED, q.task, q.id) in context.listed
        return "done"
    common = dict(
        run_id=spec.run_id,
        results=spec.results,
        job_id=job_id(q, spec.config),
        query_id=q.id,
        line=q.line,
        source=source,
        config=spec.config,
    )
    if spec.reuse and ledger.reuse_by_id(Job(task=q.task, **common)):
        plan.reused += 1
        return "reused"
    if context.budget_spent():
        plan.not_enqueued += 1
        return Outcome.PENDING
    if q.task == "documents":
        documents = DocumentJob(question=q.question, candidates=q.candidates, **common)
        send(context.app, TaskName.RANK_DOCUMENTS, documents, Priority.FIRST_ROUND)
        return "enqueued"
    name = f"candidates-{digest(q.candidates)}"
    key = layout.input(name)
    if key not in context.stored and not ledger.store.exists(key):
        RunFiles(ledger.store, spec.run_id).put_candidates(name, q.candidates)
    context.stored.add(key)
    job = ChunkJob(input_key=key, n_candidates=len(q.candidates), question=q.question, **common)
    send(context.app, TaskName.PLAN_CHUNKS, job, Priority.NEW_WORK)
    return "enqueued"
