"""Read the input, check every row, and enqueue one job per valid query."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from prism.datasets import RowError, read_queries
from prism.models import Failure, Query, RunConfig, job_id
from prism.segmenting import TokenCounter
from prism.strategies import chunks
from tasks.messages import ChunkJob, DocumentJob
from tasks.ranking import enqueue_documents, enqueue_level
from workers.settings import Settings
from workers.store import RunLayout, Store, open_input, put_model


@dataclass
class Plan:
    documents: int = 0
    chunks: int = 0
    invalid_rows: int = 0
    segments: int = 0
    qrels: dict[str, dict[int, int]] = field(default_factory=dict)

    @property
    def jobs(self) -> int:
        return self.documents + self.chunks


def plan_run(
    input_uri: str,
    run_id: str,
    results: str,
    config: RunConfig,
    store: Store,
    settings: Settings,
    limit: int | None = None,
    on_query: Callable[[Plan], None] = lambda plan: None,
) -> Plan:
    """Enqueue a job for every valid query; write each bad row to the run's failures."""
    layout, plan, counter = RunLayout(run_id), Plan(), TokenCounter()
    first_line: dict[str, int] = {}
    with open_input(input_uri, settings) as stream:
        for item in read_queries(stream):
            if isinstance(item, Query) and item.id in first_line:
                item = RowError(item.line, "id", f"duplicate query id {item.id!r} (first on line {first_line[item.id]})", item.id)
            if isinstance(item, RowError):
                plan.invalid_rows += 1
                failure = Failure(run_id=run_id, kind="input", error=str(item), query_id=item.query_id, line=item.line, field=item.field)
                put_model(store, layout.failure(f"input-line-{item.line}"), failure)
                continue
            first_line[item.id] = item.line
            if item.qrel:
                plan.qrels[item.id] = item.qrel
            _enqueue(item, run_id, results, config, store, layout, counter, plan)
            on_query(plan)
            if limit and plan.jobs >= limit:
                break
    store.put(layout.file("qrels.json"), json.dumps(plan.qrels).encode())
    return plan


def _enqueue(q: Query, run_id: str, results: str, config: RunConfig, store: Store, layout: RunLayout, counter: TokenCounter, plan: Plan) -> None:  # fmt: skip
    common = dict(run_id=run_id, results=results, job_id=job_id(q, config), query_id=q.id, line=q.line, config=config)
    if q.task == "documents":
        enqueue_documents(DocumentJob(question=q.question, candidates=q.candidates, **common))
        plan.documents += 1
        return
    data = chunks.prepare(q.question, q.candidates, counter, config.segment_tokens)
    key = layout.input(q.id)
    put_model(store, key, data)  # stored before the jobs that read it are enqueued
    level = chunks.first_level(data, config.top_n, config.segment_top_k, config.segment_tokens)
    enqueue_level(ChunkJob(input_key=key, n_candidates=len(q.candidates), **common), 0, level)
    plan.chunks += 1
    plan.segments += len(level.segments)
