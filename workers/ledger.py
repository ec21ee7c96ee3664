"""The run ledger: the one place that writes a job's outcome (a result, a failure, a skip, a
reuse) and the calls no outcome holds, under the run's folder as workers/runfiles.py lays it out.
A query without an outcome is pending. Results and failures are written once: a job delivered
twice keeps its first outcome, and the second one's calls go to spent/.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

import redis
import structlog
from pydantic import BaseModel

from prism.models import CallRecord, Cited, Failure, JobResult, Ranking, Spent, Task
from workers import keys
from workers.messages import Job
from workers.runfiles import ENDED, FOLDERS, Outcome, RunLayout
from workers.store import Store, get_model, index_key, last_over_key, put_model, result_key, safe_name

log = structlog.get_logger("prism")


class Progress(Protocol):
    """Which jobs of a run have an outcome, kept beside the store so that watching a run does
    not list the store on every tick. ``run`` is :func:`workers.keys.progress` of the run."""

    def add(self, run: str, name: str) -> None: ...

    def discard(self, run: str, names: list[str]) -> None: ...

    def count(self, run: str) -> int: ...

    def plan(self, planned: str, plans: str, question: str, outcomes: int, record: str) -> None:
        """A question is planned, with this plan, and waits for this many outcomes (the keys:
        :func:`workers.keys.planned` and :func:`workers.keys.plans` of its run)."""

    def planned(self, run: str) -> tuple[int, int]:
        """How many questions are planned, and the outcomes they wait for in all."""
        ...

    def plans(self, plans: str) -> dict[str, str]:
        """Every planned question's plan, by question id."""
        ...


class RedisProgress:
    def __init__(self, client: redis.Redis):
        self.client = client

    def add(self, run: str, name: str) -> None:
        pipe = self.client.pipeline()
        pipe.sadd(run, name)
        pipe.expire(run, keys.PROGRESS_TTL_S)
        pipe.execute()

    def discard(self, run: str, names: list[str]) -> None:
        if names:
            self.client.srem(run, *names)

    def count(self, run: str) -> int:
        return int(self.client.scard(run))

    def plan(self, planned: str, plans: str, question: str, outcomes: int, record: str) -> None:
        pipe = self.client.pipeline()
        pipe.hset(plans, question, record)
        pipe.hset(planned, question, outcomes)  # second: a question counts as planned once its plan is kept
        for key in (plans, planned):
            pipe.expire(key, keys.PROGRESS_TTL_S)
        pipe.execute()

    def planned(self, run: str) -> tuple[int, int]:
        counts = self.client.hvals(run)
        return len(counts), sum(int(n) for n in counts)

    def plans(self, plans: str) -> dict[str, str]:
        return {_text(q): _text(r) for q, r in self.client.hgetall(plans).items()}


class MemoryProgress:
    """For embedded runs: the workers are threads of the producer's own process."""

    def __init__(self) -> None:
        self.finished: dict[str, set[str]] = {}
        self.questions: dict[str, dict[str, int]] = {}
        self.records: dict[str, dict[str, str]] = {}

    def add(self, run: str, name: str) -> None:
        self.finished.setdefault(run, set()).add(name)

    def discard(self, run: str, names: list[str]) -> None:
        self.finished.get(run, set()).difference_update(names)

    def count(self, run: str) -> int:
        return len(self.finished.get(run, ()))

    def plan(self, planned: str, plans: str, question: str, outcomes: int, record: str) -> None:
        self.records.setdefault(plans, {})[question] = record
        self.questions.setdefault(planned, {})[question] = outcomes

    def planned(self, run: str) -> tuple[int, int]:
        counts = self.questions.get(run, {})
        return len(counts), sum(counts.values())

    def plans(self, plans: str) -> dict[str, str]:
        return dict(self.records.get(plans, {}))


class Found(NamedTuple):
    key: str | None  # a result to reuse
    lost: str | None = None  # a result an index named that is gone


def progress_name(task: Task, query_id: str) -> str:
    return f"{task}/{safe_name(query_id)}"


class Ledger:
    """Writes each job's one outcome into its run, and counts it."""

    def __init__(self, store: Store, progress: Progress | None, on_outcome=None):
        self.store, self.progress = store, progress
        self.on_outcome = on_outcome or (lambda job, outcome, calls: None)  # metrics

    def result(
        self,
        job: Job,
        ranking: Ranking,
        calls: list[CallRecord],
        started_at: datetime,
        n_candidates: int,
        segments: int = 1,
        levels: int = 1,
        cited: list[Cited] | None = None,
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
            cited=cited or [],
            started_at=started_at,
            finished_at=datetime.now(UTC),
        )
        key = RunLayout(job.run_id).result(job.task, job.query_id)
        if put_model(self.store, key, result, if_absent=True):
            # Shared under its job id, so a later run reuses it after this run's folder is pruned.
            put_model(self.store, result_key(job.job_id), result)
            self._finished(job, Outcome.DONE, calls)
        else:
            self._spent(job, calls, "duplicate delivery: the result was already stored")

    def failure(self, job: Job, error: str, calls: list[CallRecord]) -> None:
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
        key = RunLayout(job.run_id).outcome(Outcome.FAILED, job.task, job.query_id)
        if put_model(self.store, key, failure, if_absent=True):
            self._finished(job, Outcome.FAILED, calls)
        else:
            self._spent(job, calls, "duplicate delivery: the failure was already stored")

    def skipped(self, job: Job, calls: list[CallRecord]) -> None:
        skipped = Failure(
            run_id=job.run_id,
            kind="skipped",
            error="the run's budget is spent",
            query_id=job.query_id,
            task=job.task,
            line=job.line,
            calls=calls,
        )
        put_model(self.store, RunLayout(job.run_id).outcome(Outcome.SKIPPED, job.task, job.query_id), skipped)
        self._finished(job, Outcome.SKIPPED, calls)

    def reused(self, job: Job, earlier_key: str) -> bool:
        """An earlier run's result for the same job id as this job's outcome, with no calls
        (nothing is spent) and the run it came from; False when there is none to reuse."""
        try:
            earlier = get_model(self.store, earlier_key, JobResult)
        except KeyError:
            return False
        if earlier.run_id == job.run_id:
            return False
        reused_from = earlier.reused_from or earlier.run_id
        # Under this job's query id: the same question may have had another id in that run.
        copy = earlier.model_copy(
            update={"run_id": job.run_id, "query_id": job.query_id, "reused_from": reused_from, "calls": []}
        )
        put_model(self.store, RunLayout(job.run_id).result(job.task, job.query_id), copy, if_absent=True)
        self._finished(job, Outcome.DONE, [])
        return True

    def reuse_by_id(self, job: Job) -> bool:
        """Reuse (copy) the result any earlier run stored for this job id."""
        earlier_key = self.reusable(job)
        return earlier_key is not None and self.reused(job, earlier_key)

    def has_outcome(self, job: Job) -> bool:
        """Whether the job has its outcome already (counted again, for a resumed run's watcher)."""
        layout = RunLayout(job.run_id)
        if not any(self.store.exists(layout.outcome(o, job.task, job.query_id)) for o in ENDED):
            return False
        self._count(job.run_id, job.task, job.query_id)
        return True

    def planned(self, job: Job, record: BaseModel, outcomes: int) -> None:
        """A question's plan, and the number of outcomes it waits for (its watcher's total):
        kept beside the store until the run gathers every plan into its files (a night's run
        writes no file per question), or in the store when there is nothing beside it."""
        if self.progress is None:
            put_model(self.store, RunLayout(job.run_id).question(job.query_id), record)
            return
        uri = self.store.uri
        planned, plans = keys.planned(uri, job.run_id), keys.plans(uri, job.run_id)
        self.progress.plan(planned, plans, job.query_id, outcomes, record.model_dump_json())

    def reference(self, job: Job, earlier_key: str) -> str | None:
        """An earlier result as this pair's outcome, by reference: its question's plan (which the
        ledger keeps, see ``planned``) names the result, so a night that reuses a thousand
        questions writes no file for each. The run that ranked it; None when it is gone, or when
        this run ranked it (for another question: ranked again, as before results were shared)."""
        try:
            earlier = get_model(self.store, earlier_key, JobResult)
        except KeyError:
            return None
        if earlier.run_id == job.run_id:  # ranked in this run, for another question: ranked for this one too
            return None
        self._finished(job, Outcome.DONE, [])
        return earlier.reused_from or earlier.run_id

    def reusable(self, job: Job) -> str | None:
        """Where a result for this job id is kept, if any run ranked it."""
        return self.find(job).key

    def find(self, job: Job) -> Found:
        """Where a result for this job id is kept: the shared copy, or where an earlier release's
        index points. An index entry whose target is gone is a miss, removed (the job ranks again
        and its result takes the entry's place) and named in ``lost``."""
        shared = result_key(job.job_id)
        if self.store.exists(shared):
            return Found(shared)
        try:
            earlier_key = self.store.get(index_key(job.job_id)).decode()
        except KeyError:
            return Found(None)
        if earlier_key.startswith(RunLayout(job.run_id).base + "/"):
            return Found(None)
        if self.store.exists(earlier_key):
            return Found(earlier_key)
        self.store.delete(index_key(job.job_id))
        log.info("a reusable result is gone: ranked again", job_id=job.job_id, key=earlier_key)
        return Found(None, lost=earlier_key)

    def lost(self, run_id: str, task: Task, query_id: str, line: int | None, error: str) -> None:
        """A job the run enqueued that never got an outcome: a failure saying so, unless it has one."""
        failure = Failure(run_id=run_id, kind="job", task=task, query_id=query_id, line=line, error=error)
        if put_model(self.store, RunLayout(run_id).outcome(Outcome.FAILED, task, query_id), failure, if_absent=True):
            self._count(run_id, task, query_id)

    def invalid(self, failure: Failure, source: str, line: int) -> None:
        """A bad input row or file: it never becomes a job."""
        put_model(self.store, RunLayout(failure.run_id).invalid(source, line), failure)

    def reopen(self, run_id: str, outcome: Outcome) -> int:
        """Make a run's skipped (a budget stopped them) or failed jobs pending again, for a resume;
        the calls their outcomes held are kept as spent, so they stay accounted. Returns how many."""
        layout, names = RunLayout(run_id), []
        for key in list(self.store.keys(layout.folder(outcome))):
            ended = get_model(self.store, key, Failure)
            if ended.calls:
                reason = f"an earlier attempt that ended {outcome.value}, before a resume"
                spent = Spent(run_id=run_id, task=ended.task, query_id=ended.query_id, reason=reason, calls=ended.calls)
                put_model(self.store, layout.spent(uuid.uuid4().hex), spent)
            self.store.delete(key)
            task, name = key.split("/")[-2:]
            names.append(f"{task}/{name.removesuffix('.json')}")
        if self.progress is not None and names:
            self.progress.discard(keys.progress(self.store.uri, run_id), names)
        return len(names)

    def spent(self, job: Job, calls: list[CallRecord], reason: str, name: str | None = None) -> None:
        """Calls no outcome holds (a second delivery's, a pre-filter's embeddings), kept so they are accounted."""
        self.spent_by_run(job.run_id, calls, reason, name, job.task, job.query_id)

    def spent_by_run(
        self,
        run_id: str,
        calls: list[CallRecord],
        reason: str,
        name: str | None = None,
        task: Task | None = None,
        query_id: str = "",
        once: bool = False,
    ) -> bool:
        """Calls a run made outside its jobs (the producer's system-prompt check) or that no job's
        outcome holds, kept so they are accounted; ``once``: not when ``name`` is kept already.
        True when written."""
        if not calls:
            return False
        spent = Spent(run_id=run_id, task=task, query_id=query_id, reason=reason, calls=calls)
        return put_model(self.store, RunLayout(run_id).spent(name or uuid.uuid4().hex), spent, if_absent=once)

    def _spent(self, job: Job, calls: list[CallRecord], reason: str) -> None:
        log.warning("duplicate delivery", reason=reason)
        self.spent(job, calls, reason)
        self.on_outcome(job, "duplicate", calls)

    def _finished(self, job: Job, outcome: Outcome, calls: list[CallRecord]) -> None:
        self._count(job.run_id, job.task, job.query_id)
        self.on_outcome(job, outcome.value, calls)

    def _count(self, run_id: str, task: Task, query_id: str) -> None:
        if self.progress is not None:
            try:
                self.progress.add(keys.progress(self.store.uri, run_id), progress_name(task, query_id))
            except redis.RedisError as err:  # the watcher falls back to listing the store
                log.warning("progress not counted", error=str(err))


def outcome_keys(store: Store, run_id: str) -> set[str]:
    """The keys of every outcome a run holds now (results, failures, skips), listed once."""
    layout = RunLayout(run_id)
    return {key for outcome in FOLDERS for key in store.keys(layout.folder(outcome))}


def has_outcome(listed: set[str], run_id: str, task: Task, query_id: str) -> bool:
    layout = RunLayout(run_id)
    return any(layout.outcome(o, task, query_id) in listed for o in ENDED)


def mark_last_over(store: Store, corpus: str, run_id: str) -> None:
    """Record a finished question-set run as the last over its corpus."""
    body = {"run_id": run_id, "at": datetime.now(UTC).isoformat()}
    store.put(last_over_key(corpus), json.dumps(body).encode())


def last_over(store: Store, corpus: str) -> str | None:
    """The run id of the last finished question-set run over this corpus, if any."""
    try:
        return json.loads(store.get(last_over_key(corpus)))["run_id"]
    except KeyError:
        return None


def _text(value: bytes | str) -> str:
    """A Redis reply as text (a client made without decode_responses answers bytes)."""
    return value.decode() if isinstance(value, bytes) else value
