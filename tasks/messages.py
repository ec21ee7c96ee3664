"""What travels on the broker. Chunk texts do not: a chunk job names the stored input instead."""

from __future__ import annotations

from pydantic import BaseModel

from prism.models import RunConfig, SegmentOutcome, Task


class Job(BaseModel):
    run_id: str
    results: str  # the store the producer chose: a folder or s3://bucket/prefix
    job_id: str
    query_id: str
    line: int
    task: Task
    config: RunConfig


class DocumentJob(Job):
    task: Task = "documents"
    question: str
    candidates: list[str]


class ChunkJob(Job):
    task: Task = "chunks"
    input_key: str
    n_candidates: int


class SegmentJob(BaseModel):
    job: ChunkJob
    level: int
    number: int
    indices: list[int]
    k: int


class AggregateJob(BaseModel):
    job: ChunkJob
    level: int
    carried: list[SegmentOutcome] = []  # outcomes of earlier levels, for their calls and flags
