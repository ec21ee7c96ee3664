"""One base for every job task: it binds the log context, opens the recording, budget and
in-context-example contexts, and maps whatever the task raises to exactly one outcome.

- a rate limit, or a storage or broker hiccup: not an outcome; the task goes back to the queue
  with a countdown, carrying the calls it already paid for (at most MAX_TRANSIENT_RETRIES for
  hiccups, then a failure);
- the run's budget spent: the job is skipped (pending, for a resume);
- anything else: a failure with its reason and its calls.

Each task says what those outcomes are for it (a segment returns a failed segment outcome, so
the aggregation always runs), and keeps only its happy path.
"""

from __future__ import annotations

import random
from contextvars import ContextVar
from typing import Any, ClassVar

import redis
import structlog
from botocore.exceptions import BotoCoreError
from celery import Task
from celery.exceptions import Retry
from pydantic import BaseModel

from prism.llm import AwaitingBatch, BudgetExhausted, RateLimited, batching, recording, spending
from prism.models import CallRecord
from prism.ranking import icl
from workers import runtime
from workers.messages import AggregateJob, Job, SegmentJob

log = structlog.get_logger("prism")
# Storage and broker hiccups: worth another try later, not a failure of the job.
TRANSIENT = (BotoCoreError, ConnectionError, TimeoutError, redis.ConnectionError, redis.TimeoutError)
MAX_TRANSIENT_RETRIES = 20

_calls: ContextVar[list[CallRecord]] = ContextVar("prism_task_calls")


class JobTask(Task):
    """Subclasses name their message model and say what a failure and a skip store."""

    abstract = True
    message: ClassVar[type[BaseModel]]
    # Rate limits and batch waits put a job back as often as they last (Celery's default is 3);
    # storage hiccups are counted apart, against MAX_TRANSIENT_RETRIES.
    max_retries = None

    @property
    def runtime(self) -> runtime.Runtime:
        return runtime.of(self.app)

    def __call__(self, *args: Any) -> Any:
        parsed = self.message.model_validate(args[-1])
        job = parsed.job if isinstance(parsed, (SegmentJob, AggregateJob)) else parsed
        assert isinstance(job, Job)
        self._bind(job, parsed)
        rt = self.runtime
        with recording() as calls:
            token = _calls.set(calls)
            try:
                with spending(rt.budget(job)), batching(rt.batch_queue(job)), icl.about(job.query_id):
                    return self.run(*args)
            except Retry:
                raise
            except (RateLimited, *TRANSIENT) as err:
                if isinstance(err, AwaitingBatch):
                    rt.tick_batches(job)  # whoever waits on a batch may be the one to move it on
                if isinstance(err, RateLimited) or self.request.retries < MAX_TRANSIENT_RETRIES:
                    raise self._later(args, calls, err) from None
                return self._settle(
                    self.failed, parsed, args, f"gave up after {self.request.retries} retries: {_text(err)}"
                )
            except BudgetExhausted:
                return self._settle(self.skipped, parsed, args, None)
            except Exception as err:  # noqa: BLE001 - every failure is stored with its reason and calls
                log.warning("job failed", error=_text(err))
                return self._settle(self.failed, parsed, args, _text(err))
            finally:
                _calls.reset(token)

    def paid(self, parsed: Any, *extra: list[CallRecord]) -> list[CallRecord]:
        """Calls of earlier tries, plus those of this one so far."""
        return [*parsed.carried, *_calls.get(), *(c for calls in extra for c in calls)]

    def failed(self, parsed: Any, args: tuple, error: str) -> Any:
        raise NotImplementedError

    def skipped(self, parsed: Any, args: tuple, error: None) -> Any:
        raise NotImplementedError

    def _settle(self, outcome, parsed: Any, args: tuple, error: str | None) -> Any:
        """Store the outcome; if even that fails for a passing reason, try the job later."""
        try:
            return outcome(parsed, args, error)
        except TRANSIENT as err:
            raise self._later(args, _calls.get(), err) from None

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """What escaped __call__ (the store refusing the failure record itself): say so loudly;
        the producer's stall watch records the job as lost if it never gets an outcome."""
        log.error("job left without an outcome", error=_text(exc), task_id=task_id)

    def _bind(self, job: Job, parsed: Any) -> None:
        request = self.request
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(
            run_id=job.run_id,
            job_id=job.job_id,
            query_id=job.query_id,
            task=self.name,
            attempt=request.retries + 1,
            redelivered=bool((request.delivery_info or {}).get("redelivered")),
            **{k: getattr(parsed, k) for k in ("level", "number") if hasattr(parsed, k)},
        )

    def _later(self, args: tuple, calls: list[CallRecord], err: Exception) -> Retry:
        """Put the job back on the queue to run again after a countdown, with this try's calls."""
        message = args[-1]
        message = message | {"carried": message.get("carried", []) + [c.model_dump(mode="json") for c in calls]}
        if isinstance(err, RateLimited):
            countdown = err.retry_in + random.uniform(0, min(5.0, err.retry_in))
        else:
            countdown = min(300.0, 2.0**self.request.retries) * random.uniform(0.5, 1.0)
        log.info("job deferred", reason=str(err), countdown=round(countdown, 2))
        return self.retry(args=[*args[:-1], message], countdown=countdown, max_retries=None)


class QueryTask(JobTask):
    """A task whose message is its query's job: what ends the task is the query's outcome."""

    abstract = True

    def failed(self, job: Job, args: tuple, error: str) -> None:
        self.runtime.ledger(job.results).failure(job, error, self.paid(job))

    def skipped(self, job: Job, args: tuple, error: None) -> None:
        self.runtime.ledger(job.results).skipped(job, self.paid(job))


def _text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
