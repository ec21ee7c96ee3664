"""What travels on the broker. Chunk texts do not: a chunk job names the stored input instead."""

from __future__ import annotations

from datetime import date
from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel

from prism.ingest.archives import Member
from prism.ingest.models import Chunking
from prism.models import CallRecord, RunConfig, SegmentOutcome, Task
from prism.runs.questions import Question


class TaskName:
    """The tasks by name: the producer sends them so, without importing what they run."""

    PLAN_QUESTION = "prism.plan_question"
    PLAN_CHUNKS = "prism.plan_chunks"
    RANK_DOCUMENTS = "prism.rank_documents"
    RANK_SEGMENT = "prism.rank_segment"
    AGGREGATE_SEGMENTS = "prism.aggregate_segments"
    RANK_WHOLE = "prism.rank_whole"
    INGEST_FILE = "prism.ingest_file"
    FETCH_FILING = "prism.fetch_filing"


class Priority(IntEnum):
    """Lower goes first (the Redis transport's order; the embedded broker keeps it): a question's
    aggregation and next level run ahead of other questions' first-round segments, and those
    ahead of new planning and ingest, so results stream from the first minute instead of after
    the whole first round. The values are the Redis transport's priority steps."""

    FOLLOW_UP = 0
    FIRST_ROUND = 3
    NEW_WORK = 6


class Job(BaseModel):
    run_id: str
    results: str  # the store the producer chose: a folder or s3://bucket/prefix
    job_id: str
    query_id: str
    line: int
    source: str = ""  # the input file, when the input is a folder or prefix of files
    task: Task
    config: RunConfig  # the run's options: its budget and how requests are sent too


class DocumentJob(Job):
    task: Task = "documents"
    question: str
    candidates: list[str]
    carried: list[CallRecord] = []  # calls of earlier tries of this job (put back for a rate limit, say)


class QuestionJob(Job):
    """One question of a set over a corpus, for its planning task (tasks/planning.py): it ranks
    the forms, chooses the filings and enqueues their chunk ranking. What ends a question there
    (no filing in scope, an error) is stored as the question's own chunk outcome."""

    task: Task = "chunks"
    question: Question
    corpus: str
    # The catalogue as the run planned it, each table's version ("filings=12,companies=3"; a bare
    # number: the filings table's alone): every worker, and a resume's, plans on the same state.
    corpus_version: str
    reuse: bool = True  # an earlier run's result for the same job id is reused
    since: str | None = None  # `--new`: a question unchanged since this run reuses its results
    carried: list[CallRecord] = []


class ChunkJob(Job):
    task: Task = "chunks"
    input_key: str
    n_candidates: int
    # A question over a corpus filing: input_key names the filing's shared input in this corpus
    # store (workers.corpus.FilingInput) and the question travels here, not in the stored input.
    corpus: str | None = None
    question: str | None = None


class SegmentJob(BaseModel):
    job: ChunkJob
    level: int
    number: int
    indices: list[int]
    k: int
    carried: list[CallRecord] = []


class AggregateJob(BaseModel):
    job: ChunkJob
    level: int
    earlier: list[SegmentOutcome] = []  # outcomes of earlier levels, for their calls and flags
    carried: list[CallRecord] = []


class IngestJob(BaseModel):
    """One source file to ingest into a corpus; the worker reads the file from ``uri`` itself."""

    corpus: str  # the corpus store: a folder or s3://bucket/prefix
    name: str  # its path or key: the suffix says what kind of file it is
    uri: str
    record: dict[str, Any] = {}  # its metadata, found beside it by the producer
    chunking: Chunking
    meta: str | None = None  # a metadata JSONL that a rows file's filings are looked up in
    segment_tokens: int | None = None  # also store each filing's chunk input for this budget
    fingerprint: str = ""  # recorded with its filings, so the next ingest of an unchanged file sends no task
    exhibits: list[tuple[str, str | None]] = []  # (uri, document type) of further files of its accession
    member: Member | None = None  # a member of an archive: read by offset where it lies


class FetchJob(BaseModel):
    """One filing to fetch from EDGAR into a target (a folder or s3://bucket/prefix)."""

    target: str
    path: str  # under EDGAR's base URL: /Archives/edgar/data/CIK/ACCESSION.txt
    key: str  # under the target
    day: date  # the day it was filed: a day is done when all its filings are


class Fetched(BaseModel):
    """How a fetch ended: written, already there (no request), or failed and why."""

    key: str
    day: date
    status: Literal["fetched", "present", "failed"]
    reason: str | None = None
    bytes: int = 0
