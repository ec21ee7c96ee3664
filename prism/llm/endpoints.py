"""Where LLM requests go and how they are sent: an endpoint, its retry policy, the options every
request carries. Plain values, light to import (settings build them; prism.llm sends with them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, field_validator

from prism.llm.adaptive import UPPER_BOUND

OutputCapParam = Literal["auto", "max_completion_tokens", "max_tokens", "both"]
FLEX_TIMEOUT_S = 900.0  # flex requests may queue: a longer default timeout


@dataclass(frozen=True)
class Endpoint:
    base_url: str | None = None  # None: api.openai.com
    api_key: str | None = None
    provider: Literal["openai", "azure"] = "openai"
    api_version: str | None = None  # Azure only
    # The request field that carries the output cap; auto: max_completion_tokens for OpenAI and
    # Azure, max_tokens for any other server (llama.cpp reads only that one; vLLM and LiteLLM read it too).
    output_cap_param: OutputCapParam = "auto"

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.base_url or 'api.openai.com'}"

    @property
    def hosted(self) -> bool:
        """A known hosted API (its limits are per minute, its slots many); else a server a team runs."""
        host = urlsplit(self.base_url).hostname or "" if self.base_url else "api.openai.com"
        return self.provider == "azure" or host in HOSTED or host.endswith(HOSTED_SUFFIXES)

    def cap_fields(self, cap: int | None) -> dict[str, int]:
        if not cap:
            return {}
        param = self.output_cap_param
        if param == "auto":
            host = urlsplit(self.base_url).hostname if self.base_url else "api.openai.com"
            openai_hosted = self.provider == "azure" or host == "api.openai.com"
            param = "max_completion_tokens" if openai_hosted else "max_tokens"
        names = ("max_completion_tokens", "max_tokens") if param == "both" else (param,)
        return dict.fromkeys(names, cap)


HOSTED = frozenset(
    {
        "api.openai.com",
        "api.anthropic.com",
        "api.mistral.ai",
        "api.groq.com",
        "api.together.xyz",
        "api.fireworks.ai",
        "api.deepseek.com",
        "openrouter.ai",
        "generativelanguage.googleapis.com",
    }
)
HOSTED_SUFFIXES = (".openai.azure.com", ".services.ai.azure.com")
# A server a team runs that says nothing of itself (llama-cpp-python, Ollama): its in-flight limit
# starts at one request and adapts (prism.llm.adaptive), and its context is one no model of that kind
# lacks. Each is said at the start of a run.
SELF_HOSTED_START = 1
SELF_HOSTED_CONTEXT = 4096
CONTEXT_MARGIN = 0.1  # of the context: tokenizers differ from ours; chat templates add their own


@dataclass(frozen=True)
class ServerFacts:
    """What a self-hosted server says of itself (prism.llm.serverinfo reads it): its slots, the
    requests it computes at once (llama.cpp's /props total_slots); its context; the most requests
    it takes before refusing with 429 (TGI's /info max_concurrent_requests); where it reports
    requests waiting (vLLM's /metrics); ``source``, where they came from in a word, and
    ``sources``, each fact's (fact, where)."""

    slots: int | None = None
    context: int | None = None
    source: str = "nothing reported"
    enforced_slots: int | None = None
    queue_metric_url: str | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def source_of(self, fact: str) -> str | None:
        """Where ``fact`` ("slots", "context", "enforced_slots", "queue_metric_url") came from."""
        return dict(self.sources).get(fact)


@dataclass(frozen=True)
class InFlight:
    """How many of an (endpoint, model)'s requests go at once, and where that came from: a fixed
    ``cap`` (PRISM_LLM_CONCURRENCY; 0, a hosted API's: none), or, where ``cap`` is None, an
    adaptive limit (prism.llm.adaptive) that starts at ``start`` and stays within ``ceiling`` (the
    slots a server enforces, else the upper bound). ``queue_metric_url``: where the server
    reports requests waiting; ``timeout_s``: the request timeout, which no step up may reach."""

    cap: int | None
    source: str
    start: int = SELF_HOSTED_START
    ceiling: int = UPPER_BOUND
    enforced: bool = False
    queue_metric_url: str | None = None
    timeout_s: float | None = None

    @property
    def adaptive(self) -> bool:
        return self.cap is None


def segment_budget(context: int, output_tokens: int, overhead: int) -> int:
    """The prompt tokens of one segment that fit a context: what is left after the expected
    output, the prompt's own words and a margin."""
    return max(256, int(context * (1 - CONTEXT_MARGIN)) - output_tokens - overhead)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    timeout_s: float = 120.0
    timeout_retries: int = 1  # re-sends of a timed-out request; counted apart from max_attempts
    # Output tokens reserved per request (limiter, budget) until its use is known; at most its cap.
    # Not the cap itself: a reasoning model's cap is many times what it usually writes.
    expected_output_tokens: int = 1000
    # An endpoint down this long (since its first failure) fails its calls; until then they wait.
    outage_s: float = 1800.0


@dataclass(frozen=True)
class RequestOptions:
    """What goes with every chat request besides the prompt."""

    service_tier: Literal["standard", "flex"] = "standard"
    reasoning_effort: Mapping[str, str] = field(default_factory=dict)  # per stage; absent: not sent
    prompt_cache_key: bool = True


_RATE = re.compile(r"\s*(\d+)\s*(?:/|per)\s*(\d+)?\s*(second|minute|hour|day)s?\s*", re.IGNORECASE)
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class Rate:
    amount: int
    seconds: float


def parse_rate(text: str) -> Rate:
    """``"500/minute"``, ``"200000 per minute"``, ``"150/10 seconds"``."""
    found = _RATE.fullmatch(text)
    if not found:
        raise ValueError(f"{text!r} is not a rate like '500/minute' or '150/10 seconds'")
    return Rate(int(found[1]), int(found[2] or 1) * _UNIT_S[found[3].lower()])


class ModelLimits(BaseModel):
    """E.g. ``{"requests": "500/minute", "tokens": "200000/minute"}``."""

    requests: str | None = None
    tokens: str | None = None

    @field_validator("requests", "tokens")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value
