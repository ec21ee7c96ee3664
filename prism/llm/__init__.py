"""The one place that talks to an LLM: the Gateway (gateway.py) and the path its requests take
(steps.py, in the order STEPS lists). The cache, limiter, circuit and budget are interfaces
(ports.py) that the fleet backs with Redis and S3. Beside them, what the path needs of the
servers: endpoints, what a server says of itself (serverinfo), the adaptive in-flight limit,
the Batch API's lines and prices.

May import: prism's shared modules.
"""

from prism.llm.errors import (
    AwaitingBatch,
    BatchApiError,
    BudgetExhausted,
    ContextTooLong,
    Deferred,
    LlmError,
    ProviderUnavailable,
    RateLimited,
)
from prism.llm.gateway import (
    CACHE_MIN_TOKENS,
    QUOTED_REPLY_TOKENS,
    Completion,
    Gateway,
    prefix_id,
    prompt_cache_key,
    quoted_reply,
)
from prism.llm.ports import (
    OUTAGE_WAIT_S,
    BatchQueue,
    Budget,
    Cache,
    Circuit,
    Limiter,
    NoLimiter,
    Outage,
    Reservation,
    batching,
    recording,
    spending,
)
from prism.llm.replies import PROMPT_GAP_SHARE
from prism.llm.steps import STEPS, cache_key

__all__ = [
    "CACHE_MIN_TOKENS",
    "OUTAGE_WAIT_S",
    "PROMPT_GAP_SHARE",
    "QUOTED_REPLY_TOKENS",
    "STEPS",
    "AwaitingBatch",
    "BatchApiError",
    "BatchQueue",
    "Budget",
    "BudgetExhausted",
    "Cache",
    "Circuit",
    "Completion",
    "ContextTooLong",
    "Deferred",
    "Gateway",
    "Limiter",
    "LlmError",
    "NoLimiter",
    "Outage",
    "ProviderUnavailable",
    "RateLimited",
    "Reservation",
    "batching",
    "cache_key",
    "prefix_id",
    "prompt_cache_key",
    "quoted_reply",
    "recording",
    "spending",
]
