"""A request's path, as one list: ``STEPS``, outermost first, then the transport (the SDK call).

Each step is one concern with the same hooks: ``before`` (may answer the request, or raise to
stop it), ``after`` (sees the reply on its way back) and ``failed`` (says what to raise instead).
Retries and slots wrap the rest of the path in ``handle`` itself. Steps share nothing but the
``Request`` they pass on, where each writes what it learned (the attempts, the probe, the
reservation) for the steps after it; docs/fleet.md lists the path, and a test checks that it
matches STEPS.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception

from prism.llm.adaptive import Outcome, Sample
from prism.llm.endpoints import Endpoint, InFlight, RetryPolicy
from prism.llm.errors import AwaitingBatch, ContextTooLong, LlmError, ProviderUnavailable
from prism.llm.ports import (
    BatchQueue,
    Cache,
    Circuit,
    Limiter,
    Outage,
    Reservation,
    current_batch,
    current_budget,
    record,
)
from prism.llm.pricing import PriceTable
from prism.llm.replies import (
    describe,
    is_context_overflow,
    is_retryable,
    is_unavailable,
    overflow_context,
    prompt_gap,
    retry_after,
)
from prism.models import CallRecord, Stage, Usage


def cache_key(endpoint: Endpoint, model: str, payload: list) -> str:
    """Same endpoint, model, request and parameters: same key."""
    body = json.dumps([endpoint.key, model, payload], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass
class Request:
    """One request on its way down the path, and what the steps learned of it."""

    stage: Stage
    model: str
    endpoint: Endpoint
    payload: list  # what identifies the request's answer (its response-cache key)
    prompt: int  # prompt tokens, as counted here
    output: int  # output tokens expected, reserved until the real use is known
    # The SDK call, returning its raw response. Its client is made before the path: nothing slow
    # may come between the rate limit's take and the request going out, or the provider's window
    # slides later than the fleet's and refuses what the fleet's admitted.
    send: Callable[[], Any]
    decode: Callable[[Any], dict]  # the parsed response -> the body the caller reads
    tier: str  # the service tier asked for
    check_prompt: bool = False  # flag a server that counted far fewer prompt tokens than were sent
    prompt_key: str | None = None  # the provider's prompt-cache key, paced by the limiter
    batch_body: dict | None = None  # the request as a Batch API line; None: never batched
    started: float = field(default_factory=time.monotonic)
    key: str = ""
    queue: BatchQueue | None = None  # the run's batch, where this request may go
    reserved_usd: Decimal = Decimal(0)
    trial: Outage | None = None  # the outage this request probes the endpoint in, once
    attempts: int = 0
    throttled: int = 0
    timeouts: int = 0
    down_since: float | None = None  # the first attempt that found the endpoint unavailable
    reservation: Reservation | None = None

    def __post_init__(self) -> None:
        self.key = cache_key(self.endpoint, self.model, self.payload)

    def latency(self) -> float:
        return round(time.monotonic() - self.started, 4)


@dataclass
class Reply:
    """The transport's answer, and the body and call record the steps make of it."""

    response: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    usage: Usage | None = None  # what the server reported using; None: it reported nothing
    sent_s: float | None = None  # from the request sent to its reply read: the server's time and the wire's
    body: dict = field(default_factory=dict)
    call: CallRecord | None = None
    accounted: bool = False  # recorded elsewhere already (a batch answer, by the batch driver)


class Parts(Protocol):
    """What the steps are built from: the Gateway's collaborators."""

    prices: PriceTable
    policy: RetryPolicy
    limiter: Limiter
    cache: Cache | None
    circuit: Circuit | None
    contexts: MutableMapping[str, int]

    def in_flight(self, endpoint: Endpoint, model: str) -> InFlight: ...


Proceed = Callable[[Request], Reply]


class Step:
    """One concern on the path. Override the hooks; ``handle`` runs them around the rest."""

    def __init__(self, parts: Parts):
        self.parts = parts

    def handle(self, request: Request, proceed: Proceed) -> Reply:
        if (early := self.before(request)) is not None:
            return early
        try:
            reply = proceed(request)
        except Exception as err:
            raised = self.failed(request, err)
            if raised is err:
                raise
            raise raised from err
        self.after(request, reply)
        return reply

    def before(self, request: Request) -> Reply | None:
        return None

    def after(self, request: Request, reply: Reply) -> None:
        return None

    def failed(self, request: Request, err: Exception) -> Exception:
        return err


class Accounting(Step):
    """Every call that was made or answered is recorded, the failed ones and the cache hits too."""

    def after(self, request: Request, reply: Reply) -> None:
        if reply.call is not None and not reply.accounted:
            record(reply.call)

    def failed(self, request: Request, err: Exception) -> Exception:
        if (call := getattr(err, "call", None)) is not None:
            record(call)
        return err


class ResponseCache(Step):
    """An identical request is answered from the cache at $0, recorded with what its first call cost."""

    def before(self, request: Request) -> Reply | None:
        cache = self.parts.cache
        if request.batch_body is not None and cache is not None:
            request.queue = current_batch()
        if cache is None or (hit := cache.get(request.key)) is None:
            return None
        first = Usage.model_validate(hit["usage"]) if "usage" in hit else None
        saved = self.parts.prices.usd(request.model, first, request.tier) if first is not None else None
        call = CallRecord(
            stage=request.stage,
            model=request.model,
            latency_s=request.latency(),
            attempts=0,
            usd=Decimal(0),
            cached=True,
            response_cache_saved_usd=saved or Decimal(0),
        )
        # This run's batch answer: the batch driver accounted it, once.
        this_batch = request.queue is not None and hit.get("batch_run") == request.queue.run_id
        return Reply(body=hit, call=call, accounted=this_batch)

    def after(self, request: Request, reply: Reply) -> None:
        if self.parts.cache is not None and reply.call is not None and all(reply.body.values()):
            usage = reply.call.usage.model_dump(mode="json")
            self.parts.cache.put(request.key, reply.body | {"model": request.model, "usage": usage})


class RunBudget(Step):
    """The expected price is reserved against the run's budget (BudgetExhausted past it), then
    swapped for the real one. A batch request is reserved at the batch price: a spent budget
    stops it too."""

    def before(self, request: Request) -> None:
        if (budget := current_budget()) is None:
            return
        expected = Usage(prompt_tokens=request.prompt, completion_tokens=request.output)
        tier = "batch" if request.queue is not None else request.tier
        request.reserved_usd = self.parts.prices.usd(request.model, expected, tier) or Decimal(0)
        budget.reserve(request.reserved_usd)

    def after(self, request: Request, reply: Reply) -> None:
        if (budget := current_budget()) is not None and reply.call is not None:
            budget.settle(request.reserved_usd, reply.call.usd)

    def failed(self, request: Request, err: Exception) -> Exception:
        if (budget := current_budget()) is not None:
            budget.settle(request.reserved_usd, Decimal(0))
        return err


class BatchApi(Step):
    """In a batch-mode run a chat request goes into the run's next batch (AwaitingBatch), or,
    after its last try in one, on online."""

    def before(self, request: Request) -> None:
        if (queue := request.queue) is None:
            return
        if queue.defer(request.key, request.stage, request.model, request.batch_body or {}):
            raise AwaitingBatch(queue.retry_in, f"{request.stage} request to {request.model} is in the run's batch")
        request.queue = None


class CircuitBreaker(Step):
    """An endpoint that is down once a call's retries ran out opens its circuit: calls wait for it
    (ProviderUnavailable) without a request, but for one probe per wait; an answer closes it.
    Past RetryPolicy.outage_s since the first failure, calls are tried once each and fail for good."""

    def before(self, request: Request) -> None:
        circuit, key = self.parts.circuit, request.endpoint.key
        if circuit is None or (outage := circuit.outage(key)) is None:
            return
        if time.time() - outage.since > self.parts.policy.outage_s or circuit.probe(key, outage.wait_s()):
            request.trial = outage
            return
        raise ProviderUnavailable(
            outage.wait_s(), f"{_where(request.endpoint)} unavailable since {_clock(outage.since)}"
        )

    def after(self, request: Request, reply: Reply) -> None:
        if request.trial is not None and self.parts.circuit is not None:
            self.parts.circuit.closed(request.endpoint.key)

    def failed(self, request: Request, err: Exception) -> Exception:
        import openai

        circuit, cause = self.parts.circuit, err.__cause__
        if circuit is None or not isinstance(err, LlmError):
            return err
        if is_unavailable(cause or err):
            return self._down(request, err)
        if request.trial is not None and isinstance(cause, openai.APIStatusError):
            circuit.closed(request.endpoint.key)  # it answered, if only to refuse this request
        return err

    def _down(self, request: Request, err: LlmError) -> Exception:
        """Open the endpoint's circuit (this failure holds the next probe back a wait) and wait
        for it, or, down longer than the outage window, fail for good."""
        assert self.parts.circuit is not None
        endpoint, outage_s = request.endpoint, self.parts.policy.outage_s
        outage = self.parts.circuit.failed(endpoint.key, request.down_since or time.time(), err.call.error or "")
        self.parts.circuit.probe(endpoint.key, outage.wait_s())
        if time.time() - outage.since <= outage_s:
            what = f"{_where(endpoint)} unavailable since {_clock(outage.since)} ({err.call.error})"
            waiting = ProviderUnavailable(outage.wait_s(), what)
            waiting.call = err.call
            return waiting
        return LlmError(
            f"provider at {_where(endpoint)} unavailable since {_clock(outage.since, date=True)} for more than "
            f"PRISM_OUTAGE_S={outage_s:g} s: {err.call.error}",
            err.call,
        )


class Metering(Step):
    """What the request used and cost, as a CallRecord: the usage the server reported, priced at
    the tier that answered; a failure becomes an LlmError carrying its record."""

    def after(self, request: Request, reply: Reply) -> None:
        response, model, usage = reply.response, request.model, reply.usage
        # The tier that answered: a flex request may be served at another tier, and billed so.
        served = getattr(response, "service_tier", None)
        tier = "flex" if served == "flex" else "standard" if served else request.tier
        price = self.parts.prices.priced(model, usage, tier)  # no usage reported: unpriced
        reply.body = request.decode(response)
        reply.call = CallRecord(
            stage=request.stage,
            model=model,
            usage=usage or Usage(),
            latency_s=request.latency(),
            attempts=request.attempts,
            throttled=request.throttled,
            timeouts=request.timeouts,
            timed_out_prompt_tokens=request.prompt * request.timeouts,
            tier=tier,
            **price,
            prompt_token_gap=prompt_gap(request.prompt, usage) if request.check_prompt else None,
        )

    def failed(self, request: Request, err: Exception) -> Exception:
        import openai

        if not isinstance(err, openai.OpenAIError):
            return err
        call = CallRecord(
            stage=request.stage,
            model=request.model,
            latency_s=request.latency(),
            attempts=request.attempts or 1,
            throttled=request.throttled,
            timeouts=request.timeouts,
            timed_out_prompt_tokens=request.prompt * request.timeouts,
            # Refused requests are not billed; a timed-out one may have been generated.
            usd=None if request.timeouts else Decimal(0),
            error=describe(err),
            tier=request.tier,
        )
        kind = ContextTooLong if is_context_overflow(err) else LlmError
        return kind(
            f"{request.stage} call to {request.model} failed after {call.attempts} attempt(s): {call.error}", call
        )


class Retries(Step):
    """429, 5xx and timeouts are tried again, after the provider's Retry-After or a backoff. A
    timed-out generation is re-sent at most ``timeout_retries`` times (the server may still be
    generating the abandoned answer); a probe of a down endpoint is not asked twice."""

    def handle(self, request: Request, proceed: Proceed) -> Reply:
        policy = self.parts.policy

        def attempt() -> Reply:
            import openai

            request.attempts += 1
            try:
                return proceed(request)
            except openai.OpenAIError as err:
                request.timeouts += isinstance(err, openai.APITimeoutError)
                request.throttled += isinstance(err, openai.APIStatusError) and err.status_code == 429
                if request.down_since is None and is_unavailable(err):
                    request.down_since = time.time()
                raise

        def stop(state: RetryCallState) -> bool:
            return state.attempt_number >= policy.max_attempts or request.timeouts > policy.timeout_retries

        def retry(err: BaseException) -> bool:
            return is_retryable(err) and not (request.trial is not None and is_unavailable(err))

        return Retrying(retry=retry_if_exception(retry), wait=backoff(policy), stop=stop, reraise=True)(attempt)


class Slots(Step):
    """One of the (endpoint, model)'s requests in flight at once, held while an attempt runs: its
    wait is not part of the request's timeout. Where the limit adapts, how each attempt ended
    (its latency and size, a timeout, an overload) is reported to steer it."""

    def handle(self, request: Request, proceed: Proceed) -> Reply:
        limit, limiter = self.parts.in_flight(request.endpoint, request.model), self.parts.limiter
        with limiter.slot(request.endpoint.key, request.model, limit) as in_flight:
            started = time.monotonic()
            try:
                reply = proceed(request)
            except Exception as err:
                if limit.adaptive and (outcome := capacity_signal(err)):
                    sample = Sample(time.monotonic() - started, request.prompt, 0, outcome, in_flight or None)
                    limiter.answered(request.endpoint.key, request.model, limit, sample)
                raise
            if limit.adaptive:
                used = reply.usage
                prompt, output = (used.prompt_tokens, used.completion_tokens) if used else (request.prompt, 0)
                latency = reply.sent_s if reply.sent_s is not None else time.monotonic() - started
                sample = Sample(latency, prompt, output, "ok", in_flight or None)
                limiter.answered(request.endpoint.key, request.model, limit, sample)
            return reply


def capacity_signal(err: Exception) -> Outcome | None:
    """What an attempt's error says of the server's capacity: it gave up waiting ("timeout"), the
    server refused for load (a 429 or 503, "overloaded"); None: nothing."""
    import openai

    if isinstance(err, openai.APITimeoutError):
        return "timeout"
    if isinstance(err, openai.APIStatusError) and err.status_code in (429, 503):
        return "overloaded"
    return None


class RateLimit(Step):
    """The provider's requests and tokens per minute, taken before each attempt (RateLimited when
    the wait would be long) and settled with the real use and the provider's own count."""

    def before(self, request: Request) -> None:
        tokens = request.prompt + request.output
        request.reservation = self.parts.limiter.acquire(
            request.endpoint.key, request.model, tokens, request.prompt_key
        )

    def after(self, request: Request, reply: Reply) -> None:
        assert request.reservation is not None
        used = reply.usage.total_tokens if reply.usage else None
        self.parts.limiter.settle(request.reservation, used, reply.headers)

    def failed(self, request: Request, err: Exception) -> Exception:
        import openai

        if isinstance(err, openai.OpenAIError) and request.reservation is not None:
            # The provider's count is news even on a refusal. A refused request used nothing;
            # one that timed out or broke may have been counted: its reservation stands.
            status = err.status_code if isinstance(err, openai.APIStatusError) else None
            headers = err.response.headers if isinstance(err, openai.APIStatusError) else {}
            self.parts.limiter.settle(request.reservation, 0 if status is not None and status < 500 else None, headers)
        return err


class ContextLearning(Step):
    """A reply saying the prompt overflows names the model's context: kept, so inputs are cut to it."""

    def failed(self, request: Request, err: Exception) -> Exception:
        if is_context_overflow(err) and (context := overflow_context(err)) is not None:
            self.parts.contexts[f"{request.endpoint.key}:{request.model}"] = context
        return err


# The request's path, outermost first; the transport comes after the last.
STEPS: tuple[type[Step], ...] = (
    Accounting,
    ResponseCache,
    RunBudget,
    BatchApi,
    CircuitBreaker,
    Metering,
    Retries,
    Slots,
    RateLimit,
    ContextLearning,
)


def chain(parts: Parts, transport: Proceed) -> Proceed:
    """STEPS built on ``parts`` and joined in their order, the transport last."""
    proceed = transport
    for step in reversed([kind(parts) for kind in STEPS]):
        proceed = _joined(step, proceed)
    return proceed


def _joined(step: Step, proceed: Proceed) -> Proceed:
    return lambda request: step.handle(request, proceed)


def backoff(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    """The provider's Retry-After when it gives one (plus a little jitter, so a fleet does not
    come back in step), else full-jitter exponential backoff; both capped."""

    def wait(state: RetryCallState) -> float:
        cap = policy.backoff_cap_s
        hint = retry_after(state.outcome.exception()) if state.outcome else None
        if hint is not None:
            return min(cap, hint + random.uniform(0, 0.1 * hint + 0.05))
        return random.uniform(0, min(cap, policy.backoff_base_s * 2 ** (state.attempt_number - 1)))

    return wait


def _where(endpoint: Endpoint) -> str:
    return endpoint.base_url or "api.openai.com"


def _clock(epoch: float, date: bool = False) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC" if date else "%H:%M:%S UTC")
