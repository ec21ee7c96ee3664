"""The Gateway: the one object that talks to an LLM.

OpenAI, Azure OpenAI or any OpenAI-compatible server (``base_url``), through the openai SDK's
sync client (an async client breaks when Celery's processes make and drop event loops). A chat
or embeddings request is built here and sent down the path in ``prism.llm.steps.STEPS``
(response cache, run budget, Batch API, circuit, metering, retries, slots, rate limit, context
learning), whose last step hands it to the SDK. The Batch and Files API calls go straight to
the SDK with the same retries.

The output cap goes in the field the endpoint reads (``max_completion_tokens`` for OpenAI and
Azure, ``max_tokens`` for other OpenAI-compatible servers, or both). Provider prompt caching: a
prompt long enough to be cached (CACHE_MIN_TOKENS) is sent with a ``prompt_cache_key`` per
(model, prefix) that the caller names (a filing segment's content), and with 24 h retention where
the model has it; where no in-flight limit applies (a hosted API), requests of one key are also
warmed and paced by the limiter. The flex tier sends ``service_tier="flex"``, is priced at half, and its 429
"resource unavailable" is retried.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt

from prism.llm import batch
from prism.llm.adaptive import UPPER_BOUND
from prism.llm.endpoints import SELF_HOSTED_START, Endpoint, InFlight, RequestOptions, RetryPolicy, ServerFacts
from prism.llm.errors import BatchApiError
from prism.llm.ports import Cache, Circuit, Limiter, NoLimiter
from prism.llm.pricing import PriceTable
from prism.llm.replies import describe, is_retryable, usage_of
from prism.llm.serverinfo import server_facts
from prism.llm.steps import Reply, Request, backoff, chain
from prism.models import CallRecord, Stage

if TYPE_CHECKING:  # the SDK is imported where a request is made: commands that make none start sooner
    import openai

    from prism.segmenting import TokenCounter

# The provider caches prompts of at least this many tokens; shorter ones get no key, no pacing.
CACHE_MIN_TOKENS = 1024
# Models that keep a cached prefix for 24 h when asked (others only in memory, minutes).
RETENTION_24H = re.compile(r"^(gpt-5|gpt-4\.1)(-\d{4}-\d{2}-\d{2})?$")
PROBE_OUTPUT_TOKENS = 16  # a system-prompt probe's answer is not read; some servers refuse a cap under 16


def prompt_cache_key(model: str, prefix_id: str) -> str:
    """One key per (model, shared prefix): the provider routes requests of one key together."""
    return "prism-" + hashlib.sha256(f"{model}\0{prefix_id}".encode()).hexdigest()[:24]


def prefix_id(texts: list[str]) -> str:
    """A content hash of the candidates a prompt shares with other questions (a filing segment)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()


@dataclass(frozen=True)
class Completion:
    text: str
    call: CallRecord


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
        max_in_flight: int = UPPER_BOUND,
    ):
        self.endpoints = endpoints
        self.concurrency = concurrency or {}  # model ("*": any) -> requests in flight at once; 0: no cap
        self.max_in_flight = max_in_flight  # where the limit adapts: the most it grows to
        self.contexts = {} if contexts is None else contexts  # "<endpoint>:<model>" -> context learned
        self._servers: dict[tuple[Endpoint, str], ServerFacts] = {}
        self.prices = prices
        self.policy = policy
        self.limiter = limiter or NoLimiter()
        self.cache = cache
        self.options = options
        self.circuit = circuit  # None: an endpoint down fails each call after its retries
        self._counter: TokenCounter | None = None
        self._clients: dict[Endpoint, openai.OpenAI] = {}
        self._send = chain(self, self._transport)

    def _transport(self, request: Request) -> Reply:
        started = time.monotonic()
        raw = request.send()
        sent_s = time.monotonic() - started
        response = raw.parse()
        return Reply(response=response, headers=raw.headers, usage=usage_of(response), sent_s=sent_s)

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
        endpoint = self.endpoint(stage)
        client: Any = self._client(endpoint)  # messages are plain dicts here, not the SDK's typed ones
        extra: dict[str, Any] = dict(endpoint.cap_fields(max_output_tokens))
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
            # A provider spreads one key's requests over its machines past a rate, so they are
            # warmed and paced by key; a server under an in-flight limit (one a team runs) keeps
            # its prefix cache on its own machines, and pacing would only slow it.
            if self.in_flight(endpoint, model).cap != 0:
                key = None
        reply = self._send(
            Request(
                stage,
                model,
                endpoint,
                payload,
                prompt,
                min(max_output_tokens or self.policy.expected_output_tokens, self.policy.expected_output_tokens),
                lambda: client.chat.completions.with_raw_response.create(model=model, messages=messages, **extra),
                lambda response: {"text": (response.choices[0].message.content if response.choices else None) or ""},
                options.service_tier,
                check_prompt=True,
                prompt_key=key,
                batch_body={
                    "model": model,
                    "messages": messages,
                    **{k: v for k, v in extra.items() if k != "service_tier"},
                },
            )
        )
        assert reply.call is not None
        return Completion(reply.body["text"], reply.call)

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
        endpoint, tokens = self.endpoint(stage), sum(self.counter.count_many(texts))
        client = self._client(endpoint)
        reply = self._send(
            Request(
                stage,
                model,
                endpoint,
                ["embeddings", texts],
                tokens,
                0,
                lambda: client.embeddings.with_raw_response.create(model=model, input=texts),
                lambda response: {"vectors": [item.embedding for item in sorted(response.data, key=lambda d: d.index)]},
                "standard",
            )
        )
        return reply.body["vectors"]

    def server(self, endpoint: Endpoint, model: str) -> ServerFacts:
        """What a self-hosted server says of itself and the model, asked once (a hosted API: nothing)."""
        if endpoint.hosted:
            return ServerFacts(source="a hosted API")
        if (endpoint, model) not in self._servers:
            self._servers[endpoint, model] = server_facts(endpoint.base_url or "", model)
        return self._servers[endpoint, model]

    def in_flight(self, endpoint: Endpoint, model: str) -> InFlight:
        """How many of (endpoint, model)'s requests go at once: a cap given or a hosted API's none,
        else a limit that adapts, from what the server says of its slots, else from one."""
        given = self.concurrency.get(model, self.concurrency.get("*"))
        if given is not None:
            return InFlight(given, "PRISM_LLM_CONCURRENCY")
        if endpoint.hosted:
            return InFlight(0, "a hosted API: its per-minute limits, no cap")
        facts = self.server(endpoint, model)
        adapting = InFlight(
            None,
            "a server that reports no slots",
            SELF_HOSTED_START,
            self.max_in_flight,
            queue_metric_url=facts.queue_metric_url,
            timeout_s=self.policy.timeout_s,
        )
        # The slots llama.cpp computes at once, or the requests TGI takes before it refuses: a ceiling.
        if said := facts.slots or facts.enforced_slots:
            where = facts.source_of("slots" if facts.slots else "enforced_slots")
            ceiling = min(said, self.max_in_flight)
            return replace(adapting, source=f"the server's {where}", start=ceiling, ceiling=ceiling, enforced=True)
        return adapting

    def context(self, endpoint: Endpoint, model: str) -> tuple[int | None, str]:
        """The (endpoint, model)'s context in tokens, and where it came from; None: unknown."""
        if (learned := self.contexts.get(f"{endpoint.key}:{model}")) is not None:
            return int(learned), "learned from its overflow reply"
        facts = self.server(endpoint, model)
        return facts.context, f"the server's {facts.source_of('context') or facts.source}"

    # -- the Batch API: the same requests, sent as files ---------------------------------------

    def upload_batch(self, stage: Stage, data: bytes, name: str) -> str:
        return self._batch_call(stage, lambda c: c.files.create(file=(name, data), purpose="batch")).id

    def create_batch(self, stage: Stage, file_id: str, metadata: dict[str, str]) -> dict:
        """Sent once: a create whose reply was lost may have made the batch, and a second would
        answer its lines twice (the driver finds a batch made so by its metadata)."""
        return self._batch_call(
            stage,
            lambda c: c.batches.create(
                input_file_id=file_id, endpoint=batch.URL, completion_window=batch.WINDOW, metadata=metadata
            ),
            attempts=1,
        ).model_dump()

    def get_batch(self, stage: Stage, batch_id: str) -> dict:
        return self._batch_call(stage, lambda c: c.batches.retrieve(batch_id)).model_dump()

    def cancel_batch(self, stage: Stage, batch_id: str) -> dict:
        return self._batch_call(stage, lambda c: c.batches.cancel(batch_id)).model_dump()

    def list_batches(self, stage: Stage) -> list[dict]:
        return self._batch_call(stage, lambda c: [b.model_dump() for b in c.batches.list(limit=100)])

    def batch_file(self, stage: Stage, file_id: str) -> bytes:
        return self._batch_call(stage, lambda c: c.files.content(file_id).content)

    def _batch_call(self, stage: Stage, send, attempts: int | None = None):
        """One Batch API or Files API request, retried like a chat request (up to ``attempts``)."""
        import openai

        client = self._client(self.endpoint(stage))
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            wait=backoff(self.policy),
            stop=stop_after_attempt(attempts or self.policy.max_attempts),
            reraise=True,
        )
        try:
            return retrying(send, client)
        except openai.OpenAIError as err:
            refused = isinstance(err, openai.APIStatusError) and err.status_code < 500
            raise BatchApiError(describe(err), refused) from err

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


# The unreadable reply is quoted back in the retry up to this many tokens: a runaway reply in
# full would only fill the context again.
QUOTED_REPLY_TOKENS = 64


def quoted_reply(gateway: Gateway, reply: str) -> dict:
    """The unreadable reply as the assistant turn of a retry, cut to QUOTED_REPLY_TOKENS."""
    quoted = gateway.counter.truncate(reply, QUOTED_REPLY_TOKENS)
    return {"role": "assistant", "content": quoted + (" [...]" if quoted != reply else "")}
