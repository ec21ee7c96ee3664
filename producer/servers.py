"""A run's LLM servers, said at its start: how many requests each (endpoint, model) takes at once
and where that came from, and, for a server a team runs, the segment budget that fits its
context (prompt, expected output and a margin) unless PRISM_SEGMENT_TOKENS is set. The budget is
resolved into the run's config, so it is in the job ids."""

from __future__ import annotations

from collections.abc import Callable

from prism.llm.endpoints import SELF_HOSTED_CONTEXT, InFlight, segment_budget
from prism.models import RunConfig, Stage
from workers.settings import Settings, named

PROMPT_WORDS = 1000  # a chunk prompt's own tokens around the segment: instructions, question, examples


def in_flight_said(limit: InFlight) -> str:
    """'adapting from 1 request(s) at a time, up to 64 (PRISM_LLM_MAX_IN_FLIGHT): a server that
    reports no slots', or '4 request(s) at a time, from PRISM_LLM_CONCURRENCY'."""
    if limit.cap is not None:
        shown = f"{limit.cap} request(s) at a time" if limit.cap else "no cap on requests at a time"
        return f"{shown}, from {limit.source}"
    within = (
        f"the server's {limit.ceiling} slots" if limit.enforced else f"{limit.ceiling} ({named('llm_max_in_flight')})"
    )
    return f"adapting from {limit.start} request(s) at a time, up to {within}: {limit.source}"


def fit_servers(config: RunConfig, settings: Settings, say: Callable[[str], None]) -> RunConfig:
    """The config with its segment budget fitted to a self-hosted server's context; each LLM
    endpoint's cap on requests in flight said."""
    if not settings.llm_configured:
        return config
    from workers.runtime import Runtime

    gateway = Runtime(settings).gateway
    assert gateway is not None
    said: set[tuple[str, str]] = set()
    for stage in sorted(config.paid_stages() - {"embeddings"}):
        endpoint, model = gateway.endpoint(stage), config.models[stage]
        if (endpoint.key, model) in said or endpoint.hosted:
            continue
        said.add((endpoint.key, model))
        say(f"{endpoint.base_url} ({model}): {in_flight_said(gateway.in_flight(endpoint, model))}")
    chunks: Stage | None = "segments" if "segments" in config.paid_stages() else None
    if chunks is None or "segment_tokens" in settings.model_fields_set:
        return config
    endpoint, model = gateway.endpoint(chunks), config.models[chunks]
    if endpoint.hosted:
        return config
    context, where = gateway.context(endpoint, model)
    if context is None:
        context, where = SELF_HOSTED_CONTEXT, "a conservative default for a server that reports none"
    output = min(config.output_cap(chunks) or settings.llm_expected_output_tokens, settings.llm_expected_output_tokens)
    budget = min(config.segment_tokens, segment_budget(context, output, PROMPT_WORDS))
    say(f"segments of {budget:,} tokens: a context of {context:,} ({where}), {output:,} for the answer")
    return config.model_copy(update={"segment_tokens": budget})
