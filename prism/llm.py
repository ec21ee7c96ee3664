"""The one place that talks to an LLM.

OpenAI, Azure OpenAI or any OpenAI-compatible server (``base_url``), through the openai SDK's
sync client (an async client breaks when Celery's processes make and drop event loops). A
request goes: response cache -> run budget -> rate limiter -> SDK call -> retries on 429, 5xx
and timeouts honouring Retry-After -> usage, price and the provider's limit headers recorded.
Every call is recorded, the failed ones and the cache hits too.

A timed-out generation is re-sent at most ``timeout_retries`` times, apart from the attempts
for 429 and 5xx: the server may still be generating the abandoned answer, and duplicates only
slow it down. The output cap goes in the field the endpoint reads (``max_completion_tokens`` for
OpenAI and Azure, ``max_tokens`` for other OpenAI-compatible servers, or both). A server that
counts far fewer prompt tokens than were sent (a chat format that drops the system prompt) is
flagged on the call.

Provider prompt caching: a prompt long enough to be cached (CACHE_MIN_TOKENS) is sent with a
``prompt_cache_key`` per (model, prefix) that the caller names (a filing segment's content), and
with 24 h retention where the model has it; the limiter paces each key. The flex tier sends
``service_tier="flex"``, is priced at half, and its 429 "resource unavailable" is retried.

An endpoint that is down (connection refused or reset, 502/503/504/529, overloaded) once a
call's retries have run out opens its circuit (``Circuit``): the call raises ProviderUnavailable,
a rate limit, so its job waits in the queue instead of failing; while the circuit is open other
calls raise it at once, without a request, but for one probe per wait; an answer closes it. Past
``RetryPolicy.outage_s`` since the first failure, calls are tried once each and fail for good.

The cache, the limiter, the circuit and the budget are interfaces; the fleet backs them with
Redis and S3.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from prism import batch
from prism.endpoints import SELF_HOSTED_SLOTS, Endpoint, RequestOptions, RetryPolicy, ServerFacts
from prism.models import CallRecord, Stage, Usage
from prism.pricing import PriceTable

if TYPE_CHECKING:  # the SDK is imported where a request is made: commands that make none start sooner
    import openai

    from prism.segmenting import TokenCounter

# The provider caches prompts of at least this many tokens; shorter ones get no key, no pacing.
CACHE_MIN_TOKENS = 1024
# Models that keep a cached prefix for 24 h when asked (others only in memory, minutes).
RETENTION_24H = re.compile(r"^(gpt-5|gpt-4\.1)(-\d{4}-\d{2}-\d{2})?$")
# The server counted under this share of the prompt tokens sent: part of the prompt was dropped.
PROMPT_GAP_SHARE = 0.5
PROBE_OUTPUT_TOKENS = 16  # a system-prompt probe's answer is not read; some servers refuse a cap under 16
# An endpoint that is down: calls wait about as long as it has been down, within these bounds
# (5 s, 10, 20, 40, 60, 60...; the task adds its jitter), and one probe per wait tries it.
OUTAGE_WAIT_S = (5.0, 60.0)
UNAVAILABLE_STATUS = (502, 503, 504, 529)


def prompt_cache_key(model: str, prefix_id: str) -> str:
    """One key per (model, shared prefix): the provider routes requests of one key together."""
    return "prism-" + hashlib.sha256(f"{model}\0{prefix_id}".encode()).hexdigest()[:24]


def prefix_id(texts: list[str]) -> str:
    """A content hash of the candidates a prompt shares with other questions (a filing segment)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()


class Deferred(Exception):
    """Not a failure: the job must wait (rate limit) or stop (budget) and is not done."""


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

    def slot(self, endpoint: str, model: str, cap: int) -> AbstractContextManager[None]:
        """One of ``cap`` requests in flight to (endpoint, model), held while the request runs."""
        ...


class NoLimiter:
    def acquire(self, endpoint: str, model: str, tokens: int, prompt_key: str | None = None) -> Reservation:
        return Reservation(endpoint, model, tokens, prompt_key)

    def settle(self, reservation: Reservation, used: int | None, headers: Mapping[str, str]) -> None:
        return None

    def slot(self, endpoint: str, model: str, cap: int) -> AbstractContextManager[None]:
        return nullcontext()


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


class LlmError(RuntimeError):
    """The call failed for good: retries ran out, or the error is one that retrying cannot fix."""

    def __init__(self, message: str, call: CallRecord):
        super().__init__(message)
        self.call = call


class BatchApiError(RuntimeError):
    """A Files or Batch API request failed for good (the batch driver tries again next poll)."""


class ContextTooLong(LlmError):
    """The prompt does not fit the model's context: cut the input smaller and ask again."""


@dataclass(frozen=True)
class Completion:
    text: str
    call: CallRecord


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


class Gateway:
    def __init__(
        self,
        endpoints: Mapping[Stage, Endpoint] | Endpoint,
        prices: PriceTable,
        policy: RetryPolicy = RetryPolicy(),
        limiter: Limiter | None = None,
        cache: Cache | None = None,
        options: RequestOptions = RequestOptions(),
        circuit: Circuit | None = None,
        concurrency: Mapping[str, int] | None = None,
        contexts: MutableMapping[str, int] | None = None,
    ):
        self.endpoints = endpoints
        self.concurrency = concurrency or {}  # model ("*": any) -> requests in flight at once; 0: no cap
        self.contexts = {} if contexts is None else contexts  # "<endpoint>:<model>" -> context learned
        self._servers: dict[Endpoint, ServerFacts] = {}
        self.prices = prices
        self.policy = policy
        self.limiter = limiter or NoLimiter()
        self.cache = cache
        self.options = options
        self.circuit = circuit  # None: an endpoint down fails each call after its retries
        self._counter: TokenCounter | None = None
        self._clients: dict[Endpoint, openai.OpenAI] = {}

    @property
    def counter(self) -> TokenCounter:
        """The prompt-token counter, loaded at the first request (commands that make none skip it)."""
        if self._counter is None:
            from prism.segmenting import TokenCounter

            self._counter = TokenCounter()
        return self._counter

    def endpoint(self, stage: Stage) -> Endpoint:
        if isinstance(self.endpoints, Endpoint):
            return self.endpoints
        return self.endpoints.get(stage) or Endpoint()

    def complete(
        self,
        messages: list[dict],
        *,
        stage: Stage,
        model: str,
        max_output_tokens: int | None = None,
        shared_prefix: str | None = None,
    ) -> Completion:
        """``shared_prefix``: an id of the part of the prompt other requests share (see prefix_id)."""
        extra: dict = dict(self.endpoint(stage).cap_fields(max_output_tokens))
        prompt = self.counter.count("".join(m["content"] for m in messages)) + 4 * len(messages)
        options, payload = self.options, ["chat", messages, max_output_tokens]
        if effort := options.reasoning_effort.get(stage):
            extra["reasoning_effort"] = effort
            payload.append(effort)  # another effort may answer otherwise
        if options.service_tier == "flex":
            extra["service_tier"] = "flex"
        key = None
        if options.prompt_cache_key and shared_prefix and prompt >= CACHE_MIN_TOKENS:
            key = extra["prompt_cache_key"] = prompt_cache_key(model, shared_prefix)
            if RETENTION_24H.match(model):
                extra["prompt_cache_retention"] = "24h"
        body, call = self._request(
            stage,
            model,
            payload,
            prompt,
            min(max_output_tokens or self.policy.expected_output_tokens, self.policy.expected_output_tokens),
            lambda client: client.chat.completions.with_raw_response.create(model=model, messages=messages, **extra),
            lambda response: {"text": (response.choices[0].message.content if response.choices else None) or ""},
            check_prompt=True,
            prompt_key=key,
            batch_body={
                "model": model,
                "messages": messages,
                **{k: v for k, v in extra.items() if k != "service_tier"},
            },
        )
        return Completion(body["text"], call)

    def prompt_counts(self, stage: Stage, model: str, system: str, user: str) -> tuple[int | None, int | None]:
        """The server's own prompt-token counts for ``user`` with ``system`` before it, and alone
        (None where it reports no usage): a server that reads the system prompt counts it in the
        difference, whatever its tokenizer. Two short requests, each accounted."""
        counts = []
        for messages in (
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            [{"role": "user", "content": user}],
        ):
            call = self.complete(messages, stage=stage, model=model, max_output_tokens=PROBE_OUTPUT_TOKENS).call
            counts.append(None if call.cached else call.usage.prompt_tokens or None)
        return counts[0], counts[1]

    def embed(self, texts: list[str], *, model: str, stage: Stage = "embeddings") -> list[list[float]]:
        tokens = sum(self.counter.count_many(texts))
        body, _ = self._request(
            stage,
            model,
            ["embeddings", texts],
            tokens,
            0,
            lambda client: client.embeddings.with_raw_response.create(model=model, input=texts),
            lambda response: {"vectors": [item.embedding for item in sorted(response.data, key=lambda d: d.index)]},
        )
        return body["vectors"]

    def server(self, endpoint: Endpoint) -> ServerFacts:
        """What a self-hosted server says of itself, asked once (a hosted API: nothing)."""
        if endpoint.hosted:
            return ServerFacts(source="a hosted API")
        if endpoint not in self._servers:
            self._servers[endpoint] = server_facts(endpoint.base_url or "")
        return self._servers[endpoint]

    def slots(self, endpoint: Endpoint, model: str) -> tuple[int, str]:
        """The requests (endpoint, model) takes at once (0: no cap), and where that came from."""
        given = self.concurrency.get(model, self.concurrency.get("*"))
        if given is not None:
            return given, "PRISM_LLM_CONCURRENCY"
        if endpoint.hosted:
            return 0, "a hosted API: its per-minute limits, no cap"
        facts = self.server(endpoint)
        if facts.slots:
            return facts.slots, f"the server's {facts.source}"
        return SELF_HOSTED_SLOTS, "the default for a server that reports no slots"

    def context(self, endpoint: Endpoint, model: str) -> tuple[int | None, str]:
        """The (endpoint, model)'s context in tokens, and where it came from; None: unknown."""
        if (learned := self.contexts.get(f"{endpoint.key}:{model}")) is not None:
            return int(learned), "learned from its overflow reply"
        facts = self.server(endpoint)
        return facts.context, f"the server's {facts.source}"

    def _request(
        self,
        stage: Stage,
        model: str,
        payload: list,
        prompt: int,
        output: int,
        send,
        decode,
        check_prompt=False,
        prompt_key: str | None = None,
        batch_body: dict | None = None,
    ) -> tuple[dict, CallRecord]:
        """cache -> (batch) -> budget -> limiter and retries -> usage, price, limits settled -> recorded."""
        import openai

        endpoint, started = self.endpoint(stage), time.monotonic()
        key = cache_key(endpoint, model, payload)
        queue = _batch.get() if batch_body is not None else None
        tier = "standard" if payload[0] == "embeddings" else self.options.service_tier
        if (found := self._cached(key, stage, model, tier, started, queue)) is not None:
            return found
        budget = _budget.get()
        expected = Usage(prompt_tokens=prompt, completion_tokens=output)
        reserved_usd = self._reserve(budget, queue, key, stage, model, expected, tier, batch_body)
        trial = None
        try:
            trial = self._admit(endpoint)
            response, headers, reservation, attempts, throttled, timeouts = self._call(
                endpoint, model, send, prompt + output, prompt_key, once=trial is not None
            )
        except Deferred:
            if budget is not None:
                budget.settle(reserved_usd, Decimal(0))
            raise
        except openai.OpenAIError as err:
            if budget is not None:
                budget.settle(reserved_usd, Decimal(0))
            raise self._failed(err, stage, model, endpoint, started, prompt, tier, trial) from err
        if trial is not None and self.circuit is not None:
            self.circuit.closed(endpoint.key)
        usage = _usage(response)
        self.limiter.settle(reservation, usage.total_tokens if usage else None, headers)
        # The tier that answered: a flex request may be served at another tier, and billed so.
        served = getattr(response, "service_tier", None)
        tier = "flex" if served == "flex" else "standard" if served else tier
        price = self.prices.priced(model, usage, tier)  # no usage reported: unpriced
        if budget is not None:
            budget.settle(reserved_usd, price["usd"])
        body = decode(response)
        call = CallRecord(
            stage=stage,
            model=model,
            usage=usage or Usage(),
            latency_s=round(time.monotonic() - started, 4),
            attempts=attempts,
            throttled=throttled,
            timeouts=timeouts,
            timed_out_prompt_tokens=prompt * timeouts,
            tier=tier,
            **price,
            prompt_token_gap=prompt_gap(prompt, usage) if check_prompt else None,
        )
        if self.cache is not None and all(body.values()):
            self.cache.put(key, body | {"model": model, "usage": call.usage.model_dump(mode="json")})
        return body, self._account(call)

    def _cached(
        self, key: str, stage: Stage, model: str, tier: str, started: float, queue: BatchQueue | None
    ) -> tuple[dict, CallRecord] | None:
        """The response cache's answer, recorded as a call at $0 with what its first call cost."""
        if self.cache is None or (hit := self.cache.get(key)) is None:
            return None
        first = Usage.model_validate(hit["usage"]) if "usage" in hit else None
        saved = self.prices.usd(model, first, tier) if first is not None else None
        call = CallRecord(
            stage=stage,
            model=model,
            latency_s=round(time.monotonic() - started, 4),
            attempts=0,
            usd=Decimal(0),
            cached=True,
            response_cache_saved_usd=saved or Decimal(0),
        )
        if queue is not None and hit.get("batch_run") == queue.run_id:
            return hit, call  # this run's batch answer: the batch driver accounted it, once
        return hit, self._account(call)

    def _reserve(
        self,
        budget: Budget | None,
        queue: BatchQueue | None,
        key: str,
        stage: Stage,
        model: str,
        expected: Usage,
        tier: str,
        batch_body: dict | None,
    ) -> Decimal:
        """The request's expected price reserved against the run's budget (a spent budget stops a
        batch request too: the driver charges the lines); a batch-mode request goes into the run's
        batch instead (AwaitingBatch), or online after its last try in one, reserved at that price."""
        batched = queue is not None and self.cache is not None
        reserved_usd = self.prices.usd(model, expected, "batch" if batched else tier) or Decimal(0)
        if budget is not None:
            budget.reserve(reserved_usd)
        if not batched or queue is None:
            return reserved_usd
        if budget is not None:
            budget.settle(reserved_usd, Decimal(0))
        if queue.defer(key, stage, model, batch_body or {}):
            raise AwaitingBatch(queue.retry_in, f"{stage} request to {model} is in the run's batch")
        reserved_usd = self.prices.usd(model, expected) or Decimal(0)
        if budget is not None:
            budget.reserve(reserved_usd)
        return reserved_usd

    def _failed(
        self,
        err: openai.OpenAIError,
        stage: Stage,
        model: str,
        endpoint: Endpoint,
        started: float,
        prompt: int,
        tier: str,
        trial: Outage | None,
    ) -> Exception:
        """A request that failed for good, recorded: what to raise (a wait, for an outage)."""
        import openai

        timeouts = getattr(err, "prism_timeouts", 0)
        call = self._account(
            CallRecord(
                stage=stage,
                model=model,
                latency_s=round(time.monotonic() - started, 4),
                attempts=getattr(err, "prism_attempts", 1),
                throttled=getattr(err, "prism_throttled", 0),
                timeouts=timeouts,
                timed_out_prompt_tokens=prompt * timeouts,
                # Refused requests are not billed; a timed-out one may have been generated.
                usd=None if timeouts else Decimal(0),
                error=describe(err),
                tier=tier,
            )
        )
        if self.circuit is not None:
            if is_unavailable(err):
                return self._down(endpoint, getattr(err, "prism_down_since", time.time()), call)
            if trial is not None and isinstance(err, openai.APIStatusError):
                self.circuit.closed(endpoint.key)  # it answered, if only to refuse this request
        kind = ContextTooLong if is_context_overflow(err) else LlmError
        return kind(f"{stage} call to {model} failed after {call.attempts} attempt(s): {call.error}", call)

    def _admit(self, endpoint: Endpoint) -> Outage | None:
        """None: the endpoint's circuit is closed. Else the outage this call tries the endpoint
        in, once: as the probe of this wait, or past the outage window (to fail for good, or find
        it back). Any other call raises ProviderUnavailable, without a request."""
        if self.circuit is None or (outage := self.circuit.outage(endpoint.key)) is None:
            return None
        if time.time() - outage.since > self.policy.outage_s or self.circuit.probe(endpoint.key, outage.wait_s()):
            return outage
        raise ProviderUnavailable(outage.wait_s(), f"{_where(endpoint)} unavailable since {_clock(outage.since)}")

    def _down(self, endpoint: Endpoint, since: float, call: CallRecord) -> Deferred | LlmError:
        """The endpoint is down: open its circuit (this failure holds the next probe back a wait)
        and wait for it, or, down longer than the outage window, fail for good."""
        assert self.circuit is not None
        outage = self.circuit.failed(endpoint.key, since, call.error or "")
        self.circuit.probe(endpoint.key, outage.wait_s())
        if time.time() - outage.since <= self.policy.outage_s:
            what = f"{_where(endpoint)} unavailable since {_clock(outage.since)} ({call.error})"
            return ProviderUnavailable(outage.wait_s(), what)
        return LlmError(
            f"provider at {_where(endpoint)} unavailable since {_clock(outage.since, date=True)} for more than "
            f"PRISM_OUTAGE_S={self.policy.outage_s:g} s: {call.error}",
            call,
        )

    def _call(
        self, endpoint: Endpoint, model: str, send, reserved: int, prompt_key: str | None = None, once: bool = False
    ):
        """The request with its retries; ``once``: the endpoint is down, and an unavailable
        answer is not asked again."""
        import openai

        client = self._client(endpoint)
        attempts = throttled = timeouts = 0
        down_since: float | None = None  # the first attempt that found the endpoint unavailable

        cap, _ = self.slots(endpoint, model)

        def attempt():
            with self.limiter.slot(endpoint.key, model, cap):  # its wait is not the request's timeout
                return sent()

        def sent():
            nonlocal attempts, throttled, timeouts, down_since
            attempts += 1
            reservation = self.limiter.acquire(endpoint.key, model, reserved, prompt_key)
            try:
                raw = send(client)
            except openai.OpenAIError as err:
                if is_context_overflow(err) and (context := overflow_context(err)) is not None:
                    self.contexts[f"{endpoint.key}:{model}"] = context
                timeouts += isinstance(err, openai.APITimeoutError)
                throttled += isinstance(err, openai.APIStatusError) and err.status_code == 429
                if down_since is None and is_unavailable(err):
                    down_since = time.time()
                # The provider's count is news even on a refusal. A refused request used nothing;
                # one that timed out or broke may have been counted: its reservation stands.
                refused = isinstance(err, openai.APIStatusError) and err.status_code < 500
                headers = err.response.headers if isinstance(err, openai.APIStatusError) else {}
                self.limiter.settle(reservation, 0 if refused else None, headers)
                raise
            return raw.parse(), raw.headers, reservation

        def stop(state: RetryCallState) -> bool:
            return state.attempt_number >= self.policy.max_attempts or timeouts > self.policy.timeout_retries

        def retry(err: BaseException) -> bool:
            return is_retryable(err) and not (once and is_unavailable(err))

        retrying = Retrying(retry=retry_if_exception(retry), wait=self._wait, stop=stop, reraise=True)
        try:
            response, headers, reservation = retrying(attempt)
        except openai.OpenAIError as err:
            counts = (("attempts", attempts), ("throttled", throttled), ("timeouts", timeouts))
            for name, value in (*counts, ("down_since", down_since or time.time())):
                setattr(err, f"prism_{name}", value)  # read back where the failed call is recorded
            raise
        return response, headers, reservation, attempts, throttled, timeouts

    # -- the Batch API: the same requests, sent as files ---------------------------------------

    def upload_batch(self, stage: Stage, data: bytes, name: str) -> str:
        return self._batch_call(stage, lambda c: c.files.create(file=(name, data), purpose="batch")).id

    def create_batch(self, stage: Stage, file_id: str, metadata: dict[str, str]) -> dict:
        return self._batch_call(
            stage,
            lambda c: c.batches.create(
                input_file_id=file_id, endpoint=batch.URL, completion_window=batch.WINDOW, metadata=metadata
            ),
        ).model_dump()

    def get_batch(self, stage: Stage, batch_id: str) -> dict:
        return self._batch_call(stage, lambda c: c.batches.retrieve(batch_id)).model_dump()

    def cancel_batch(self, stage: Stage, batch_id: str) -> dict:
        return self._batch_call(stage, lambda c: c.batches.cancel(batch_id)).model_dump()

    def list_batches(self, stage: Stage) -> list[dict]:
        return self._batch_call(stage, lambda c: [b.model_dump() for b in c.batches.list(limit=100)])

    def batch_file(self, stage: Stage, file_id: str) -> bytes:
        return self._batch_call(stage, lambda c: c.files.content(file_id).content)

    def _batch_call(self, stage: Stage, send):
        """One Batch API or Files API request, retried like a chat request."""
        import openai

        client = self._client(self.endpoint(stage))
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            wait=self._wait,
            stop=stop_after_attempt(self.policy.max_attempts),
            reraise=True,
        )
        try:
            return retrying(send, client)
        except openai.OpenAIError as err:
            raise BatchApiError(describe(err)) from err

    def _client(self, endpoint: Endpoint) -> openai.OpenAI:
        import openai

        if endpoint not in self._clients:
            key, timeout = endpoint.api_key or "unused", self.policy.timeout_s
            self._clients[endpoint] = (
                openai.AzureOpenAI(
                    azure_endpoint=endpoint.base_url or "",
                    api_version=endpoint.api_version,
                    api_key=key,
                    max_retries=0,
                    timeout=timeout,
                )
                if endpoint.provider == "azure"
                else openai.OpenAI(base_url=endpoint.base_url, api_key=key, max_retries=0, timeout=timeout)
            )
        return self._clients[endpoint]

    def _wait(self, state: RetryCallState) -> float:
        """The provider's Retry-After when it gives one (plus a little jitter, so a fleet does not
        come back in step), else full-jitter exponential backoff; both capped."""
        cap = self.policy.backoff_cap_s
        hint = retry_after(state.outcome.exception()) if state.outcome else None
        if hint is not None:
            return min(cap, hint + random.uniform(0, 0.1 * hint + 0.05))
        return random.uniform(0, min(cap, self.policy.backoff_base_s * 2 ** (state.attempt_number - 1)))

    @staticmethod
    def _account(call: CallRecord) -> CallRecord:
        for ledger in _ledgers.get():
            ledger.append(call)
        return call


def cache_key(endpoint: Endpoint, model: str, payload: list) -> str:
    """Same endpoint, model, request and parameters: same key."""
    body = json.dumps([endpoint.key, model, payload], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def prompt_gap(sent: int, usage: Usage | None) -> int | None:
    """The prompt tokens the server did not count, when it counted under PROMPT_GAP_SHARE of
    those sent (tokenizers differ by far less)."""
    if usage is None or not usage.prompt_tokens or usage.prompt_tokens >= PROMPT_GAP_SHARE * sent:
        return None
    return sent - usage.prompt_tokens


def is_retryable(err: BaseException) -> bool:
    import openai

    if isinstance(err, openai.RateLimitError):
        return err.code != "insufficient_quota" and getattr(err, "type", None) != "insufficient_quota"
    if isinstance(err, (openai.APITimeoutError, openai.APIConnectionError, openai.InternalServerError)):
        return True
    return isinstance(err, openai.APIStatusError) and err.status_code in (408, 409)


def is_unavailable(err: BaseException) -> bool:
    """The endpoint is down or overloaded, not refusing this request: no connection, a gateway
    error, 503 or 529, or an overloaded error. A timeout is not: the server may be generating."""
    import openai

    if isinstance(err, openai.APITimeoutError):
        return False
    if isinstance(err, openai.APIConnectionError):
        return True
    if not isinstance(err, openai.APIStatusError):
        return False
    said = f"{err.code} {getattr(err, 'type', None)} {err.message}".lower()
    return err.status_code in UNAVAILABLE_STATUS or (err.status_code >= 500 and "overloaded" in said)


def _where(endpoint: Endpoint) -> str:
    return endpoint.base_url or "api.openai.com"


def _clock(epoch: float, date: bool = False) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC" if date else "%H:%M:%S UTC")


_OVERFLOW_CODES = ("context_length_exceeded", "exceed_context_size_error")  # OpenAI, vLLM; llama.cpp's server
_OVERFLOW_WORDS = ("maximum context length", "context window", "context size")


def is_context_overflow(err: BaseException) -> bool:
    import openai

    if not isinstance(err, openai.BadRequestError):
        return False
    message = str(err.message).lower()
    return err.code in _OVERFLOW_CODES or err.type in _OVERFLOW_CODES or any(w in message for w in _OVERFLOW_WORDS)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str | None) -> float | None:
    """OpenAI's reset headers: '1s', '6m0s', '20ms', '1h2m3.5s', or plain seconds."""
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        parts = _DURATION.findall(text)
        return sum(float(n) * _SECONDS[u] for n, u in parts) if parts else None


def retry_after(err: BaseException | None) -> float | None:
    """Seconds the provider asked us to wait: retry-after-ms, Retry-After (seconds or a date),
    else the reset time of the limit that ran out."""
    response = getattr(err, "response", None)
    if response is None:
        return None
    headers = response.headers
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        if (value := headers.get("retry-after")) is not None:
            try:
                return max(0.0, float(value))
            except ValueError:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
    resets = [
        parse_duration(headers.get(f"x-ratelimit-reset-{kind}"))
        for kind in ("requests", "tokens")
        if headers.get(f"x-ratelimit-remaining-{kind}") == "0"
    ]
    return max((r for r in resets if r is not None), default=None)


def describe(err: BaseException) -> str:
    import openai

    if isinstance(err, openai.APIStatusError):
        return f"HTTP {err.status_code}" + (f" {err.code}" if err.code else "") + f": {err.message}"
    return f"{type(err).__name__}: {err}"


def _usage(response) -> Usage | None:
    usage = response.usage
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return Usage(
        prompt_tokens=usage.prompt_tokens or 0,
        cached_tokens=(getattr(details, "cached_tokens", None) or 0) if details else 0,
        completion_tokens=getattr(usage, "completion_tokens", None) or 0,  # embeddings report none
        reasoning_tokens=(getattr(completion, "reasoning_tokens", None) or 0) if completion else 0,
    )


# The unreadable reply is quoted back in the retry up to this many tokens: a runaway reply in
# full would only fill the context again.
QUOTED_REPLY_TOKENS = 64


def quoted_reply(gateway: Gateway, reply: str) -> dict:
    """The unreadable reply as the assistant turn of a retry, cut to QUOTED_REPLY_TOKENS."""
    quoted = gateway.counter.truncate(reply, QUOTED_REPLY_TOKENS)
    return {"role": "assistant", "content": quoted + (" [...]" if quoted != reply else "")}


_CONTEXT_SAID = (
    re.compile(r"maximum context length is (\d+)"),  # OpenAI, vLLM
    re.compile(r"context window of (\d+)"),  # llama-cpp-python
    re.compile(r"context size \((\d+) tokens\)"),  # llama.cpp's server
    re.compile(r"n_ctx[^\d]{0,12}(\d+)"),
)


def overflow_context(err: BaseException) -> int | None:
    """The context an overflow reply names, in tokens; None where it names none."""
    body = getattr(err, "body", None)
    said = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(said, dict) and isinstance(said.get("n_ctx"), int):  # llama.cpp says it apart
        return said["n_ctx"]
    text = str(getattr(err, "message", err))
    for pattern in _CONTEXT_SAID:
        if found := pattern.search(text):
            return int(found.group(1))
    return None


def server_facts(base_url: str, timeout_s: float = 5.0) -> ServerFacts:
    """Ask a self-hosted server what it is: llama.cpp's ``/props`` (total_slots, n_ctx), else
    vLLM's ``/v1/models`` (max_model_len). Nothing answered: nothing reported."""
    import urllib.request

    root = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
    for url in (f"{root}/props", f"{base_url.rstrip('/')}/models"):
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as reply:  # noqa: S310 - the configured server
                data = json.loads(reply.read())
        except (OSError, ValueError):
            continue
        if url.endswith("/props") and isinstance(data, dict):
            settings = data.get("default_generation_settings") or {}
            context = data.get("n_ctx") or settings.get("n_ctx")
            if data.get("total_slots") or context:
                return ServerFacts(data.get("total_slots"), context, "/props")
        models = data.get("data") if isinstance(data, dict) else None
        lengths = [int(m["max_model_len"]) for m in models or [] if isinstance(m, dict) and m.get("max_model_len")]
        if lengths:
            return ServerFacts(None, min(lengths), "/v1/models max_model_len")
    return ServerFacts()
