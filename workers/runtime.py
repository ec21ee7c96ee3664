"""What a worker process keeps between tasks: settings, stores, the LLM gateway, rankers, and
recently loaded chunk inputs. Made lazily in each process, never shared across a fork."""

from __future__ import annotations

import os
from collections import OrderedDict
from datetime import UTC, datetime

from prism.llm import Gateway
from prism.models import CallRecord, Failure, JobResult, Ranking, Stage
from prism.pricing import PriceTable
from prism.rankers import Ranker, build_ranker
from prism.strategies.chunks import ChunkInput
from tasks.messages import ChunkJob, Job
from workers.settings import Settings
from workers.store import RunLayout, Store, get_model, open_store, put_model


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._stores: dict[str, Store] = {}
        self._rankers: dict[tuple[str, Stage], Ranker] = {}
        self._inputs: OrderedDict[tuple[str, str], ChunkInput] = OrderedDict()
        self._gateway: Gateway | None = None

    def store(self, uri: str) -> Store:
        if uri not in self._stores:
            self._stores[uri] = open_store(uri, self.settings)
        return self._stores[uri]

    def gateway(self) -> Gateway | None:
        if self._gateway is None and self.settings.llm_configured:
            prices = PriceTable.load(self.settings.prices_file)
            self._gateway = Gateway(self.settings.endpoints(), prices, self.settings.retry_policy())
        return self._gateway

    def ranker(self, job: Job, stage: Stage) -> Ranker:
        key = (job.config.fingerprint(), stage)
        if key not in self._rankers:
            self._rankers[key] = build_ranker(job.config, stage, self.gateway())
        return self._rankers[key]

    def chunk_input(self, job: ChunkJob) -> ChunkInput:
        """The stored input of a chunk query; the last few stay in memory, since a worker often
        ranks several segments of the same filing in a row."""
        key = (job.results, job.input_key)
        if key in self._inputs:
            self._inputs.move_to_end(key)
        else:
            self._inputs[key] = get_model(self.store(job.results), job.input_key, ChunkInput)
            while len(self._inputs) > 4:
                self._inputs.popitem(last=False)
        return self._inputs[key]

    def save_result(self, job: Job, ranking: Ranking, calls: list[CallRecord], started_at: datetime, n_candidates: int, segments: int = 1, levels: int = 1) -> None:  # fmt: skip
        result = JobResult(
            run_id=job.run_id, job_id=job.job_id, query_id=job.query_id, task=job.task,
            ranker=job.config.ranker_for(job.task), n_candidates=n_candidates, ranking=ranking, calls=calls,
            segments=segments, levels=levels, started_at=started_at, finished_at=datetime.now(UTC),
        )  # fmt: skip
        put_model(self.store(job.results), RunLayout(job.run_id).result(job.task, job.query_id), result)

    def save_failure(self, job: Job, error: str, calls: list[CallRecord]) -> None:
        failure = Failure(
            run_id=job.run_id, kind="job", error=error, query_id=job.query_id, task=job.task, line=job.line, calls=calls
        )
        put_model(self.store(job.results), RunLayout(job.run_id).failure(f"{job.task}-{job.query_id}"), failure)


_current: tuple[int, Runtime] | None = None


def get() -> Runtime:
    global _current
    if _current is None or _current[0] != os.getpid():
        _current = (os.getpid(), Runtime(Settings()))
    return _current[1]


def use(settings: Settings) -> Runtime:
    """Run this process's tasks with these settings (the embedded producer's own)."""
    global _current
    _current = (os.getpid(), Runtime(settings))
    return _current[1]


def reset() -> None:
    global _current
    _current = None
