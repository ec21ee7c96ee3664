"""What a request can end in besides an answer."""

from __future__ import annotations

from prism.models import CallRecord


class Deferred(Exception):
    """Not a failure: the job must wait (rate limit) or stop (budget) and is not done."""

    call: CallRecord | None = None  # the request that was made before it, if one was (accounted)


class RateLimited(Deferred):
    def __init__(self, retry_in: float, what: str):
        super().__init__(f"{what}: retry in {retry_in:.1f} s")
        self.retry_in = retry_in


class ProviderUnavailable(RateLimited):
    """The endpoint is down: the job waits for it (until RetryPolicy.outage_s)."""


class BudgetExhausted(Deferred):
    pass


class AwaitingBatch(RateLimited):
    """The request went into the run's next batch: ask again (from the response cache) later."""


class LlmError(RuntimeError):
    """The call failed for good: retries ran out, or the error is one that retrying cannot fix."""

    def __init__(self, message: str, call: CallRecord):
        super().__init__(message)
        self.call = call


class ContextTooLong(LlmError):
    """The prompt does not fit the model's context: cut the input smaller and ask again."""


class BatchApiError(RuntimeError):
    """A Files or Batch API request failed for good (the batch driver tries again next poll).
    ``refused``: the provider answered no (a 4xx), so the request made nothing; else (no answer,
    a timeout, a 5xx) it may have."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused
