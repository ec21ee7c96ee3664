"""What a worker process keeps between tasks: settings, stores, the LLM gateway (with the fleet
limiter, the endpoints' circuits and the response cache), the models runs pin, rankers, recently read chunk inputs, and
the ledger that stores outcomes. Built explicitly: once per worker process (:func:`of`), and
once per embedded run, where the producer plans with the same runtime its threads rank with."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import redis
import structlog

from prism.ingest.models import Filing
from prism.llm import Gateway, Outage
from prism.llm.pricing import PriceTable
from prism.models import CallRecord, Cited, Ranker, RunConfig, Stage
from prism.ranking.lexical import cite
from prism.ranking.prior import DocPrior
from prism.ranking.rankers import build_ranker
from prism.ranking.retrieval import INDEXES
from prism.ranking.strategies.chunks import ChunkInput
from prism.segmenting import TokenCounter
from workers import keys, metrics, priors
from workers.batches import BatchClaims, BatchDriver, BatchLimits, StoreBatchQueue, TickLock
from workers.budget import RunBudget
from workers.cache import TieredCache
from workers.circuit import Circuits, LearnedContexts, endpoints_down
from workers.corpus import Corpus
from workers.inputs import FilingInput, as_chunk_input
from workers.ledger import Ledger, MemoryProgress, Progress, RedisProgress
from workers.limiter import FleetLimiter
from workers.messages import ChunkJob, Job
from workers.settings import FaultStage, Settings, named
from workers.store import Store, get_model, open_store
from workers.vectors import StoreVectors

if TYPE_CHECKING:  # requests loads only where EDGAR is fetched
    from workers.edgar import Edgar

log = structlog.get_logger("prism")


class InjectedFault(RuntimeError):
    """Raised where PRISM_FAULT_AT names the stage: for fault tests of a real fleet."""


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.pid = os.getpid()
        self._stores: dict[str, Store] = {}
        self._models: dict[str, Any] = {}
        self._rankers: dict[tuple[str, Stage], Ranker] = {}
        # the last few chunk inputs, with their corpus filing where they come from one
        self._inputs: OrderedDict[tuple[str, str], tuple[ChunkInput, Filing | None]] = OrderedDict()
        self._counters: dict[str, TokenCounter] = {}
        self._kept: OrderedDict[tuple, Any] = OrderedDict()
        # The process's one index cache keeps its page vectors in the results store.
        INDEXES.store = StoreVectors(lambda: self.store(settings.results))

    def store(self, uri: str) -> Store:
        if uri not in self._stores:
            self._stores[uri] = open_store(uri, self.settings)
        return self._stores[uri]

    def counter(self, encoding: str) -> TokenCounter:
        """One token counter per encoding and process (loading one takes a while), on one thread:
        worker processes are the unit of scale, one per core."""
        if encoding not in self._counters:
            self._counters[encoding] = TokenCounter(encoding, threads=1)
        return self._counters[encoding]

    @cached_property
    def redis(self) -> redis.Redis | None:
        url = self.settings.shared_redis
        return redis.Redis.from_url(url, socket_timeout=10, health_check_interval=30) if url else None

    @cached_property
    def limiter(self) -> FleetLimiter:
        s = self.settings
        return FleetLimiter(
            self.redis, s.llm_limits, s.limiter_max_block_s, s.limiter_headroom, prompt_rpm=s.prompt_cache_rpm
        )

    @cached_property
    def edgar(self) -> Edgar:
        """EDGAR, behind the fleet's limiter and circuit (in this process when embedded)."""
        from workers.edgar import Edgar

        return Edgar(self.settings, self.limiter.windows, self.circuits)

    @cached_property
    def circuits(self) -> Circuits:
        """The endpoints' circuits: in Redis for the fleet, else in this process (an embedded
        run's producer sees its workers' through this runtime)."""
        return Circuits(self.redis)

    def outages(self) -> list[tuple[str, Outage]]:
        """The configured LLM endpoints that are down now, by URL, with since when."""
        if not self.settings.llm_configured:
            return []
        return endpoints_down(self.circuits, self.settings.endpoints().values())

    @cached_property
    def gateway(self) -> Gateway | None:
        s = self.settings
        if not s.llm_configured:
            return None
        cache = None
        if s.cache:
            cache = TieredCache(self.redis, self.store(s.cache_uri or s.results), s.cache_hot_ttl_s, s.cache_ttl_s)
        prices = PriceTable.load(s.prices_file)
        return Gateway(
            s.endpoints(),
            prices,
            s.retry_policy(),
            self.limiter,
            cache,
            s.request_options(),
            self.circuits,
            concurrency=s.llm_concurrency,
            max_in_flight=s.llm_max_in_flight,
            contexts=LearnedContexts(self.redis),
        )

    @cached_property
    def progress(self) -> Progress | None:
        """Redis where there is one; in memory for embedded runs; else the store is listed."""
        if self.redis is not None:
            return RedisProgress(self.redis)
        return MemoryProgress() if self.settings.embedded else None

    def ledger(self, results: str) -> Ledger:
        return Ledger(self.store(results), self.progress, self._count)

    def budget(self, job: Job) -> RunBudget | None:
        if job.config.budget_usd is None:
            return None
        if self.redis is None:
            raise RuntimeError(f"a run budget needs Redis ({named('broker_url')} or {named('redis_url')})")
        return RunBudget(self.redis, job.run_id, job.config.budget_usd)

    def batch_queue(self, job: Job) -> StoreBatchQueue | None:
        """Where a batch-mode job's requests wait for their batch; None: online."""
        if job.config.via != "batch":
            return None
        return StoreBatchQueue(self.store(job.results), job, self.settings.batch_poll_s)

    def tick_batches(self, job: Job) -> None:
        """A batch-mode job waits for its batch: its run's batches are polled, taken in and
        submitted here, unless another worker does so or did within the poll interval."""
        s, store = self.settings, self.store(job.results)
        if job.config.via != "batch" or self.gateway is None:
            return
        key = keys.batch_tick(store.uri, job.run_id)
        if not self.tick_lock.take(key):
            return
        limits = BatchLimits(s.batch_max_lines, int(s.batch_max_mb * 1024 * 1024), s.batch_max_tries, s.batch_gather_s)
        driver = BatchDriver(store, job.run_id, self.gateway, limits, self.budget(job), self.batch_claims)
        try:
            log.info("batches ticked", state=driver.tick())
        except Exception as err:  # noqa: BLE001 - the next tick tries again; the job only waits
            log.warning("batch tick failed", error=f"{type(err).__name__}: {err}")
        finally:
            self.tick_lock.keep(key, s.batch_poll_s)

    @cached_property
    def tick_lock(self) -> TickLock:
        return TickLock(self.redis)

    @cached_property
    def batch_claims(self) -> BatchClaims:
        """What puts a request into one batch, however ticks overlap: fleet-wide in Redis."""
        return BatchClaims(self.redis)

    def ranker(self, config: RunConfig, stage: Stage) -> Ranker:
        key = (config.fingerprint(), stage)
        if key not in self._rankers:
            self.checkpoint("ranker")
            prior = self._pinned(priors.PRIOR, config.prior)
            examples = self._pinned(priors.EXAMPLE_STORE, config.icl_index)
            self._rankers[key] = build_ranker(config, stage, self.gateway, prior, examples)
        return self._rankers[key]

    def prior(self, config: RunConfig) -> DocPrior:
        """The document prior the run pinned; for a run whose document ranker reads none (an LLM),
        the configured one, which stands in where that ranking failed."""
        if config.prior is None:
            key = f"standing-in:{self.settings.doc_prior or priors.PACKAGED}"
            if key not in self._models:
                self._models[key] = priors.read_prior(self.settings.doc_prior or priors.PACKAGED, self.settings)
            return self._models[key]
        return self._pinned(priors.PRIOR, config.prior)

    def _pinned(self, kind: priors.Kind, ref: str | None) -> Any:
        if ref is None:
            return None
        if ref not in self._models:
            self._models[ref] = priors.pinned(kind, ref, self.settings)
        return self._models[ref]

    def chunk_input(self, job: ChunkJob) -> ChunkInput:
        """The stored input of a chunk query; the last few stay in memory, since a worker often
        ranks several segments of the same filing in a row."""
        data, _ = self._input(job)
        return data.model_copy(update={"question": job.question}) if job.question is not None else data

    def cited(self, job: ChunkJob, indices: list[int]) -> list[Cited]:
        """A corpus pair's ranked chunks, where they are and what of them answers (none for a
        pair whose input is its own, after a pre-filter: its chunks are a subset)."""
        _, filing = self._input(job)
        if filing is None or job.question is None:
            return []
        offsets = filing.page_offsets()
        return [cite(job.question, filing.chunks[i], offsets.get(i, 0)) for i in indices]

    def _input(self, job: ChunkJob) -> tuple[ChunkInput, Filing | None]:
        self.checkpoint("input")
        key = (job.corpus or job.results, job.input_key)
        if key in self._inputs:
            self._inputs.move_to_end(key)
        elif job.corpus is not None:
            corpus = Corpus(self.store(job.corpus))
            shared = get_model(corpus.store, job.input_key, FilingInput)
            filing = corpus.get_filing(shared.filing_id, shared.version)
            self._inputs[key] = (as_chunk_input(filing, shared), filing)
        else:
            self._inputs[key] = (get_model(self.store(job.results), job.input_key, ChunkInput), None)
        while len(self._inputs) > 4:
            self._inputs.popitem(last=False)
        return self._inputs[key]

    def kept(self, key: tuple, make: Callable[[], Any]) -> Any:
        """What ``make`` gives, kept for the next tasks that ask by the same key (the last few:
        a corpus view, an earlier run's plan), so planning reads each once per process."""
        if key not in self._kept:
            self._kept[key] = make()
        self._kept.move_to_end(key)
        while len(self._kept) > 8:
            self._kept.popitem(last=False)
        return self._kept[key]

    def checkpoint(self, stage: FaultStage) -> None:
        if self.settings.fault_at == stage:
            raise InjectedFault(f"fault injected at {stage} ({named('fault_at')})")

    def _count(self, job: Job, state: str, calls: list[CallRecord]) -> None:
        metrics.record(self.redis, job.task, state, calls, self.limiter)


def of(app) -> Runtime:
    """The runtime of this process for a Celery app: the one the embedded producer set, or one
    built from the app's settings on first use in each (forked) worker process."""
    runtime = getattr(app, "prism_runtime", None)
    if runtime is None or runtime.pid != os.getpid():
        runtime = app.prism_runtime = Runtime(app.prism_settings)
    return runtime
