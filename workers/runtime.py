"""What a worker process keeps between tasks: settings, stores, the LLM gateway (with the fleet
limiter and the response cache), rankers, recently loaded chunk inputs; and how a job's outcome
is stored. Made lazily in each process, never shared across a fork."""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from functools import cached_property

import redis
import structlog

from prism.llm import Gateway
from prism.models import CallRecord, Failure, JobResult, Ranking, Spent, Stage
from prism.pricing import PriceTable
from prism.rankers import Ranker, build_ranker
from prism.strategies.chunks import ChunkInput
from tasks.messages import ChunkJob, Job
from workers import metrics
from workers.budget import RunBudget
from workers.cache import TieredCache
from workers.limiter import FleetLimiter
from workers.priors import examples_for_run, prior_for
from workers.settings import Settings
from workers.store import RunLayout, Store, get_model, open_store, put_model

log = structlog.get_logger("prism")


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._stores: dict[str, Store] = {}
        self._rankers: dict[tuple[str, Stage], Ranker] = {}
        self._inputs: OrderedDict[tuple[str, str], ChunkInput] = OrderedDict()

    def store(self, uri: str) -> Store:
        if uri not in self._stores:
            self._stores[uri] = open_store(uri, self.settings)
        return self._stores[uri]

    @cached_property
    def redis(self) -> redis.Redis | None:
        url = self.settings.shared_redis
        return redis.Redis.from_url(url, socket_timeout=10, health_check_interval=30) if url else None

    @cached_property
    def limiter(self) -> FleetLimiter:
        s = self.settings
        return FleetLimiter(s.shared_redis or "memory://", s.llm_limits, s.limiter_max_block_s, s.limiter_headroom)

    @cached_property
    def gateway(self) -> Gateway | None:
        s = self.settings
        if not s.llm_configured:
            return None
        cache = None
        if s.cache:
            cache = TieredCache(self.redis, self.store(s.cache_uri or s.results), s.cache_hot_ttl_s, s.cache_ttl_s)
        return Gateway(s.endpoints(), PriceTable.load(s.prices_file), s.retry_policy(), self.limiter, cache)

    def budget(self, job: Job) -> RunBudget | None:
        if job.budget_usd is None:
            return None
        if self.redis is None:
            raise RuntimeError("a run budget needs Redis (PRISM_BROKER_URL or PRISM_REDIS_URL)")
        return RunBudget(self.redis, job.run_id, job.budget_usd)

    def ranker(self, job: Job, stage: Stage) -> Ranker:
        key = (job.config.fingerprint(), stage)
        if key not in self._rankers:
            self._rankers[key] = build_ranker(
                job.config, stage, self.gateway, prior_for(job.config), examples_for_run(job.config)
            )
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

    # -- outcomes: each job ends in exactly one of a result, a failure or a skip ---------------

    def save_result(
        self,
        job: Job,
        ranking: Ranking,
        calls: list[CallRecord],
        started_at: datetime,
        n_candidates: int,
        segments: int = 1,
        levels: int = 1,
    ) -> None:
        result = JobResult(
            run_id=job.run_id,
            job_id=job.job_id,
            query_id=job.query_id,
            task=job.task,
            ranker=job.config.ranker_for(job.task),
            n_candidates=n_candidates,
            ranking=ranking,
            calls=calls,
            segments=segments,
            levels=levels,
            started_at=started_at,
            finished_at=datetime.now(UTC),
        )
        store, layout = self.store(job.results), RunLayout(job.run_id)
        if put_model(store, layout.result(job.task, job.query_id), result, if_absent=True):
            store.put(layout.index(job.job_id), layout.result(job.task, job.query_id).encode())
            self._count(job, "done", calls)
        else:  # delivered twice: the first result stands; the calls of this one are still paid for
            self._spent(job, calls, "duplicate delivery: the result was already stored")

    def save_failure(self, job: Job, error: str, calls: list[CallRecord]) -> None:
        failure = Failure(
            run_id=job.run_id,
            kind="job",
            error=error,
            query_id=job.query_id,
            task=job.task,
            line=job.line,
            source=job.source or None,
            calls=calls,
        )
        if put_model(
            self.store(job.results),
            RunLayout(job.run_id).failure(f"{job.task}-{job.query_id}"),
            failure,
            if_absent=True,
        ):
            self._count(job, "failed", calls)
        else:
            self._spent(job, calls, "duplicate delivery: the failure was already stored")

    def save_skipped(self, job: Job, calls: list[CallRecord]) -> None:
        skipped = Failure(
            run_id=job.run_id,
            kind="skipped",
            error="the run's budget is spent",
            query_id=job.query_id,
            task=job.task,
            line=job.line,
            calls=calls,
        )
        put_model(self.store(job.results), RunLayout(job.run_id).skipped(job.task, job.query_id), skipped)
        self._count(job, "skipped", calls)

    def _spent(self, job: Job, calls: list[CallRecord], reason: str) -> None:
        log.warning("duplicate delivery", reason=reason)
        if calls:
            spent = Spent(run_id=job.run_id, task=job.task, query_id=job.query_id, reason=reason, calls=calls)
            put_model(self.store(job.results), RunLayout(job.run_id).spent(uuid.uuid4().hex), spent)
        self._count(job, "duplicate", calls)

    def _count(self, job: Job, state: str, calls: list[CallRecord]) -> None:
        metrics.record(self.redis, job.task, state, calls, self.limiter)


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
