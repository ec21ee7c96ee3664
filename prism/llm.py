"""The one place that talks to an LLM.

OpenAI, Azure OpenAI or any OpenAI-compatible server (``base_url``), through the openai SDK's
sync client (an async client breaks when Celery's processes make and drop event loops). Every
request goes: limiter -> SDK call -> retry on 429/5xx/timeouts honouring Retry-After -> usage
and price recorded, failed calls included.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal, Protocol

import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from prism.models import CallRecord, Stage, Usage
from prism.pricing import PriceTable


@dataclass(frozen=True)
class Endpoint:
    base_url: str | None = None  # None: api.openai.com
    api_key: str | None = None
    provider: Literal["openai", "azure"] = "openai"
    api_version: str | None = None  # Azure only

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.base_url or 'api.openai.com'}"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    timeout_s: float = 120.0


class Limiter(Protocol):
    """Where the provider's limits are kept before each attempt; blocks until the request may go."""

    def acquire(self, endpoint: str, model: str, tokens: int) -> None: ...


class NoLimiter:
    def acquire(self, endpoint: str, model: str, tokens: int) -> None:
        return None


class LlmError(RuntimeError):
    """The call failed for good: retries ran out, or the error is one that retrying cannot fix."""

    def __init__(self, message: str, call: CallRecord):
        super().__init__(message)
        self.call = call


@dataclass(frozen=True)
class Completion:
    text: str
    call: CallRecord


_ledgers: ContextVar[tuple[list[CallRecord], ...]] = ContextVar("prism_llm_ledgers", default=())


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


class Gateway:
    def __init__(
        self,
        endpoints: Mapping[Stage, Endpoint] | Endpoint,
        prices: PriceTable,
        policy: RetryPolicy = RetryPolicy(),
        limiter: Limiter | None = None,
    ):
        self.endpoints = endpoints
        self.prices = prices
        self.policy = policy
        self.limiter = limiter or NoLimiter()
        self._clients: dict[Endpoint, openai.OpenAI] = {}

    def endpoint(self, stage: Stage) -> Endpoint:
        if isinstance(self.endpoints, Endpoint):
            return self.endpoints
        return self.endpoints.get(stage) or Endpoint()

    def complete(self, messages: list[dict], *, stage: Stage, model: str, max_output_tokens: int | None = None) -> Completion:
        endpoint = self.endpoint(stage)
        client = self._client(endpoint)
        estimate = sum(len(m["content"]) for m in messages) // 3 + (max_output_tokens or 1000)
        extra = {"max_completion_tokens": max_output_tokens} if max_output_tokens else {}
        started, attempts = time.monotonic(), 0

        def attempt() -> openai.types.chat.ChatCompletion:
            nonlocal attempts
            attempts += 1
            self.limiter.acquire(endpoint.key, model, estimate)
            return client.chat.completions.create(model=model, messages=messages, **extra)

        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            wait=self._wait,
            stop=stop_after_attempt(self.policy.max_attempts),
            reraise=True,
        )
        try:
            response = retrying(attempt)
        except openai.OpenAIError as err:
            call = CallRecord(
                stage=stage, model=model, latency_s=time.monotonic() - started, attempts=attempts, usd=None,
                error=describe(err),
            )  # fmt: skip
            self._account(call)
            raise LlmError(f"{stage} call to {model} failed after {attempts} attempt(s): {describe(err)}", call) from err
        usage = _usage(response)
        call = CallRecord(
            stage=stage, model=model, usage=usage or Usage(), latency_s=round(time.monotonic() - started, 4),
            attempts=attempts, usd=self.prices.usd(model, usage) if usage else None,  # no usage reported: unpriced
        )  # fmt: skip
        self._account(call)
        text = response.choices[0].message.content if response.choices else None
        return Completion(text or "", call)

    def _client(self, endpoint: Endpoint) -> openai.OpenAI:
        if endpoint not in self._clients:
            common = {"api_key": endpoint.api_key or "unused", "max_retries": 0, "timeout": self.policy.timeout_s}
            if endpoint.provider == "azure":
                self._clients[endpoint] = openai.AzureOpenAI(
                    azure_endpoint=endpoint.base_url, api_version=endpoint.api_version, **common
                )
            else:
                self._clients[endpoint] = openai.OpenAI(base_url=endpoint.base_url, **common)
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
    def _account(call: CallRecord) -> None:
        for ledger in _ledgers.get():
            ledger.append(call)


def is_retryable(err: BaseException) -> bool:
    if isinstance(err, openai.RateLimitError):
        return err.code != "insufficient_quota" and getattr(err, "type", None) != "insufficient_quota"
    if isinstance(err, (openai.APITimeoutError, openai.APIConnectionError, openai.InternalServerError)):
        return True
    return isinstance(err, openai.APIStatusError) and err.status_code in (408, 409)


def retry_after(err: BaseException | None) -> float | None:
    """Seconds the provider asked us to wait: retry-after-ms, Retry-After (seconds or a date)."""
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
    return None


def describe(err: BaseException) -> str:
    if isinstance(err, openai.APIStatusError):
        return f"HTTP {err.status_code}" + (f" {err.code}" if err.code else "") + f": {err.message}"
    return f"{type(err).__name__}: {err}"


def _usage(response) -> Usage | None:
    usage = response.usage
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        prompt_tokens=usage.prompt_tokens or 0,
        cached_tokens=(getattr(details, "cached_tokens", None) or 0) if details else 0,
        completion_tokens=usage.completion_tokens or 0,
    )
