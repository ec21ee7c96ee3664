"""The fetch task: one filing from EDGAR into a target. Whatever raises, it ends with one
outcome (fetched, present, or failed and why); while EDGAR is paused for the rate it waits,
giving the worker back, and that is not a failure."""

from __future__ import annotations

import random
from typing import Any

import structlog
from celery import Task, shared_task
from celery.exceptions import Retry

from tasks.base import MAX_TRANSIENT_RETRIES, TRANSIENT, _text
from workers import runtime
from workers.edgar import EdgarPaused, fetch_filing
from workers.messages import Fetched, FetchJob, TaskName

log = structlog.get_logger("prism")


class FetchTask(Task):
    abstract = True
    max_retries = None  # waits out EDGAR pauses for as long as they last; MAX_TRANSIENT_RETRIES bounds the rest

    def __call__(self, message: dict) -> Any:
        job = FetchJob.model_validate(message)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(task=self.name, filing=job.path, attempt=self.request.retries + 1)
        try:
            return self.run(message)
        except Retry:
            raise
        except EdgarPaused as err:
            log.info("edgar paused", wait_s=err.wait_s, why=err.why)
            raise self.retry(countdown=err.wait_s * random.uniform(1.0, 1.2)) from None
        except TRANSIENT as err:
            if self.request.retries < MAX_TRANSIENT_RETRIES:
                countdown = min(60.0, 2.0**self.request.retries) * random.uniform(0.5, 1.0)
                raise self.retry(countdown=countdown) from None
            reason = f"gave up after {self.request.retries} retries: {_text(err)}"
        except Exception as err:  # noqa: BLE001 - every filing ends in an outcome
            reason = _text(err)
        log.warning("fetch failed", error=reason)
        return Fetched(key=job.key, day=job.day, status="failed", reason=reason).model_dump(mode="json")


@shared_task(bind=True, base=FetchTask, name=TaskName.FETCH_FILING)
def fetch(self: FetchTask, message: dict) -> dict:
    job = FetchJob.model_validate(message)
    rt = runtime.of(self.app)
    return fetch_filing(rt.edgar, rt.store(job.target), job).model_dump(mode="json")
