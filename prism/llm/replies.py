"""Reading a provider's replies: which errors to retry, which say the endpoint is down or the
prompt too long, how long the provider asks us to wait, and what a reply used."""

from __future__ import annotations

import re
import time
from email.utils import parsedate_to_datetime

from prism.models import Usage

# The server counted under this share of the prompt tokens sent: part of the prompt was dropped.
PROMPT_GAP_SHARE = 0.5
UNAVAILABLE_STATUS = (502, 503, 504, 529)


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


def usage_of(response) -> Usage | None:
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
