"""The interfaces a request's steps use, which the fleet backs with Redis and S3, and the scopes
a caller opens around its requests (what to record them in, charge them to, batch them into)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from prism.llm.adaptive import Sample
from prism.llm.endpoints import InFlight
from prism.models import CallRecord, Stage

# An endpoint that is down: calls wait about as long as it has been down, within these bounds
# (5 s, 10, 20, 40, 60, 60...; the task adds its jitter), and one probe per wait tries it.
OUTAGE_WAIT_S = (5.0, 60.0)


class BatchQueue(Protocol):
    """A batch-mode run's pending requests. ``defer`` records one (``key`` is its cache key) and
    says True: wait for its batch; or False: the batch gave up on it, send it now."""

    run_id: str
    retry_in: float

    def defer(self, key: str, stage: Stage, model: str, body: dict) -> bool: ...


@dataclass(frozen=True)
class Reservation:
    """What a request took from the limiter before it went; settled once it is answered."""

    endpoint: str
    model: str
    tokens: int
    prompt_key: str | None = None
    id: str = ""  # the limiter's handle on it


class Limiter(Protocol):
    """The provider's requests/min and tokens/min. ``acquire`` blocks a short while, or raises
    RateLimited when the wait would be long; ``settle`` swaps the reservation for the real use
    and follows the provider's own count from its headers.
    A ``prompt_key`` is a cached prefix: its first request warms the provider's cache before the
    others go, and its requests are paced under the provider's per-key rate."""

    def acquire(self, endpoint: str, model: str, tokens: int, prompt_key: str | None = None) -> Reservation: ...

    def settle(self, reservation: Reservation, used: int | None, headers: Mapping[str, str]) -> None: ...

    def slot(self, endpoint: str, model: str, limit: InFlight) -> AbstractContextManager[int]:
        """One of (endpoint, model)'s requests in flight, held while an attempt runs: the
        requests in flight as it was taken, itself included (0: not counted, no cap)."""
        ...

    def answered(self, endpoint: str, model: str, limit: InFlight, sample: Sample) -> None:
        """How an attempt under an adaptive limit ended: what steers the limit."""
        ...


class NoLimiter:
    def acquire(self, endpoint: str, model: str, tokens: int, prompt_key: str | None = None) -> Reservation:
        return Reservation(endpoint, model, tokens, prompt_key)

    def settle(self, reservation: Reservation, used: int | None, headers: Mapping[str, str]) -> None:
        return None

    def slot(self, endpoint: str, model: str, limit: InFlight) -> AbstractContextManager[int]:
        return nullcontext(0)

    def answered(self, endpoint: str, model: str, limit: InFlight, sample: Sample) -> None:
        return None


@dataclass(frozen=True)
class Outage:
    """An endpoint's open circuit: down since (epoch seconds, its first failed attempt), with
    the last failure."""

    since: float
    error: str

    def wait_s(self) -> float:
        """How long calls wait for the endpoint: about as long as it has been down, within bounds."""
        low, high = OUTAGE_WAIT_S
        return min(high, max(low, time.time() - self.since))


class Circuit(Protocol):
    """Which endpoints are down, as every worker sees them. ``outage``: the endpoint's open
    circuit, None when closed; ``probe``: take the one try of the endpoint allowed in the next
    ``ttl_s`` (False: another call has it); ``failed``: open the circuit, or record one more
    failure, and return it; ``closed``: the endpoint answered."""

    def outage(self, endpoint: str) -> Outage | None: ...

    def probe(self, endpoint: str, ttl_s: float) -> bool: ...

    def failed(self, endpoint: str, since: float, error: str) -> Outage: ...

    def closed(self, endpoint: str) -> None: ...


class Cache(Protocol):
    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, value: dict) -> None: ...


class Budget(Protocol):
    """A run's spending cap; ``reserve`` raises BudgetExhausted when the call would pass it."""

    def reserve(self, usd: Decimal) -> None: ...

    def settle(self, reserved: Decimal, spent: Decimal | None) -> None: ...


_ledgers: ContextVar[tuple[list[CallRecord], ...]] = ContextVar("prism_llm_ledgers", default=())
_budget: ContextVar[Budget | None] = ContextVar("prism_llm_budget", default=None)
_batch: ContextVar[BatchQueue | None] = ContextVar("prism_llm_batch", default=None)


@contextmanager
def recording() -> Iterator[list[CallRecord]]:
    """Collect every call made inside the block, the failed ones too, so each is accounted.
    Blocks nest: a call is recorded in every open block."""
    calls: list[CallRecord] = []
    token = _ledgers.set((*_ledgers.get(), calls))
    try:
        yield calls
    finally:
        _ledgers.reset(token)


@contextmanager
def _bound(var: ContextVar, value: Any) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def spending(budget: Budget | None) -> AbstractContextManager[None]:
    """Charge the calls made inside the block to this budget."""
    return _bound(_budget, budget)


def batching(queue: BatchQueue | None) -> AbstractContextManager[None]:
    """Send the chat requests made inside the block through the Batch API (None: online)."""
    return _bound(_batch, queue)


def record(call: CallRecord) -> CallRecord:
    """Append the call to every open ``recording`` block."""
    for ledger in _ledgers.get():
        ledger.append(call)
    return call


def current_budget() -> Budget | None:
    return _budget.get()


def current_batch() -> BatchQueue | None:
    return _batch.get()
