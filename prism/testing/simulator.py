"""A provider simulator: an HTTP server on loopback that speaks OpenAI's chat-completions API
and ranks the numbered candidates it finds in the prompt.

Modes: ``lexical`` ranks by BM25; ``oracle`` ranks by the graded labels of known queries
(``add_queries``), each candidate's grade replaced by a random one with probability ``noise``.
It counts tokens, waits ``latency_s`` per request, and can be told to fail: a script of
faults for the next requests (``script("429", "malformed")``) or a rate per fault kind. It can
also be down for a while (``outage(seconds, kind)``): every request answered 503 "overloaded",
or its connection closed with no answer (``refuse``: the client sees a connection error).

It can be a self-hosted server's compute: ``slots`` requests at once and the rest queued
(llama.cpp), or ``batch_slots`` computed together, each slower as more run, whose capacity can
change mid-run (vLLM, TGI; prism.testing.batching); either way an answer whose client has left
is computed to its end. As ``server_kind`` it says what it is as that server does
(prism.testing.server_kinds): slots, context, queue, and TGI's 429 beyond its limit.

It can also behave like the servers one meets in practice: read only ``max_tokens``
(``reads_cap``, as llama.cpp does), run away and generate up to the cap or the context
(``runaway``, or a scripted "runaway" fault, as a base model that ignores the output contract),
generate slowly (``tokens_per_s``), and drop the system prompt as some chat formats do
(``drops_system``: it is neither read nor counted).

Like the provider it caches prompt prefixes (``cache``: see prism.testing.prompt_cache) and
reports them as ``prompt_tokens_details.cached_tokens``; it answers ``service_tier="flex"``
requests and can refuse them with 429 "resource unavailable" (fault ``flex_unavailable``, served
to flex requests only); beside the provider's cache it keeps the ceiling's
(``CacheModel.ceiling``: the most any schedule of the same requests could have had cached,
``stats["ceiling_cached_tokens"]``); and with ``reasoning_share`` it reports hidden reasoning as
``completion_tokens_details.reasoning_tokens`` (part of completion_tokens), a share of the prompt
per reasoning effort.

    python -m prism.testing.simulator --mode oracle --queries data.jsonl --port 8100
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import select
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prism.datasets import MARKERS, split_prompt
from prism.models import Query
from prism.ranking.lexical import LexicalRanker
from prism.ranking.rankers import document_lexical_ranker
from prism.segmenting import TokenCounter
from prism.testing import server_kinds
from prism.testing.batches import BatchApi
from prism.testing.batching import SLOWDOWN as BATCH_SLOWDOWN
from prism.testing.batching import BatchingCompute
from prism.testing.prompt_cache import CacheModel, PromptCache

FAULTS = (
    "429",
    "insufficient_quota",
    "401",
    "400",
    "context_length",
    "500",
    "503",
    "timeout",
    "malformed",
    "no_usage",
    "runaway",
    "flex_unavailable",
)
OUTAGES = ("503", "refuse")
# Reasoning tokens per prompt token, by effort. PRISM's chunk jobs were ~85% prompt and ~15%
# completion tokens (at the provider's default effort, medium): 15/85 = 0.18 of the prompt, the
# visible list of indices being a few tokens. The other efforts are scaled from it.
REASONING_SHARES: dict[str, float] = {"minimal": 0.0, "low": 0.09, "medium": 0.18, "high": 0.36}
DEFAULT_EFFORT = "medium"
# Models that accept prompt_cache_retention="24h".
RETENTION_24H = re.compile(r"^(gpt-5|gpt-4\.1)(-\d{4}-\d{2}-\d{2})?$")
RUNAWAY_TEXT = "The filing discusses the results of the quarter and the outlook for the year. "


@dataclass
class SimulatorConfig:
    mode: str = "lexical"  # or "oracle"
    latency_s: float = 0.0
    noise: float = 0.0
    seed: int = 0
    fault_rates: dict[str, float] = field(default_factory=dict)  # fault kind -> chance per request
    retry_after_s: float = 0.2  # what a scripted 429 asks the client to wait
    hang_s: float = 30.0  # how long a "timeout" fault keeps the client waiting
    # Enforced limits, as a provider does: requests and tokens (prompt + completion) per window.
    rpm: int | None = None
    tpm: int | None = None
    window_s: float = 60.0
    context_tokens: int | None = None  # longer prompts get a context_length_exceeded error
    # How it behaves as a server: the request fields it reads as the output cap, whether every
    # reply runs away (up to the cap, else the context, else runaway_tokens), its generation speed,
    # and whether its chat format drops the system prompt.
    reads_cap: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
    runaway: bool = False
    runaway_tokens: int = 8192
    tokens_per_s: float | None = None
    drops_system: bool = False
    overflow_error: str = "openai"  # or "llama.cpp": the shape of the context-overflow error
    cache: CacheModel | None = field(default_factory=CacheModel)  # None: no prompt caching
    reasoning_share: dict[str, float] | None = None  # effort -> reasoning tokens per prompt token
    # A self-hosted server's slots: at most this many chat requests computed at once, the rest
    # queued in arrival order, and an answer whose client has left still computed to its end (as
    # llama.cpp does). None: as many as come. ``props``: say the slots and context at /props
    # (llama.cpp's C++ server does; llama-cpp-python does not).
    slots: int | None = None
    props: bool = False
    # A batching server (vLLM, TGI): at most ``batch_slots`` chat requests computed at once, each
    # taking longer as more run together (its time alone, the latency model above, times
    # 1 + batch_slowdown * (k - 1) while k run), the rest queued in arrival order, and an
    # answer whose client has left computed to its end, holding its place. It says nothing of
    # its slots unless ``props``. ``capacity_at``: (seconds, slots) pairs, from that many seconds
    # after the start (or, for a configuration set on a running simulator, after its first
    # request) computing at most that many (another tenant arrived). See prism.testing.batching.
    batch_slots: int | None = None
    batch_slowdown: float = BATCH_SLOWDOWN
    capacity_at: tuple[tuple[float, int], ...] = ()
    # Answer as this kind of server says what it is (prism.testing.server_kinds): llama.cpp's
    # /props, vLLM's max_model_len and /metrics, TGI's /info (and its 429 beyond
    # max_concurrent_requests), Ollama's /api/show, LiteLLM's /model/info. None: nothing beyond
    # what ``props`` says.
    server_kind: str | None = None


@dataclass
class _Outage:
    kind: str
    seconds: float
    after: int  # starts once this many chat requests have been answered
    started: float | None = None


class Simulator:
    def __init__(
        self, config: SimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 0, clock=time.monotonic
    ):
        self.config = config or SimulatorConfig()
        self.clock = clock
        self.prompt_cache: PromptCache | None = None
        self.ceiling_cache: PromptCache | None = None
        self.clear_caches()
        self.grades: dict[str, dict[str, int]] = {}  # question -> candidate fingerprint -> grade
        self.answers: dict[str, str] = {}  # question -> reference answer
        self.stats: Counter[str] = Counter()
        self.requests: deque[dict] = deque(
            maxlen=1000
        )  # model, outcome, time, system prompt and last user message of recent requests
        self._script: deque[str] = deque()
        self._outage: _Outage | None = None
        self._lock = threading.Lock()
        self._tokens = TokenCounter()
        self._window: deque[tuple[float, int]] = deque()  # (time, tokens) of requests served
        self.served: list[tuple[float, int]] = []  # (monotonic time, tokens) of every request answered
        self._server = _Server((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.batch = BatchApi(self.answer)  # /v1/files and /v1/batches
        self._gate: tuple[int, threading.Semaphore] | None = None  # the slots, made for config.slots
        self._batching: tuple[tuple, BatchingCompute] | None = None  # made for config.batch_slots
        self._chat_in_flight = 0  # chat requests the server holds: queued, computing, abandoned or not

    def clear_caches(self) -> None:
        """Cold caches, as on a night after the provider's retention has passed."""
        if self.config.cache:
            self.prompt_cache = PromptCache(self.config.cache, self.clock)
            self.ceiling_cache = PromptCache(CacheModel.ceiling(), self.clock)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def add_queries(self, queries: Iterable[Query]) -> None:
        for q in queries:
            if q.answer:
                self.answers[q.question] = q.answer
            if q.qrel:
                table = self.grades.setdefault(q.question, {})
                for i, grade in q.qrel.items():
                    table[_fingerprint(q.candidates[i])] = grade

    def script(self, *faults: str) -> None:
        """Serve these faults, in order, to the next requests."""
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        with self._lock:
            self._script.extend(faults)

    def outage(self, seconds: float, kind: str = "503", after: int = 0) -> None:
        """Be down for ``seconds`` (0: up again now), from now or once ``after`` more chat
        requests have been answered: every request gets 503 "overloaded" (``kind="503"``) or its
        connection closed without an answer (``kind="refuse"``)."""
        if kind not in OUTAGES:
            raise ValueError(f"unknown outage kind {kind!r}; known: {OUTAGES}")
        with self._lock:
            self._outage = _Outage(kind, seconds, self.stats["requests"] + after) if seconds > 0 else None

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One of the server's slots, waited for in arrival order (none: as many as come)."""
        slots = self.config.slots
        if not slots:
            yield
            return
        with self._lock:
            if self._gate is None or self._gate[0] != slots:
                self._gate = (slots, threading.Semaphore(slots))
            gate = self._gate[1]
        with self._lock:
            self.stats["in_flight"] += 1
        try:
            with gate:
                yield
        finally:
            with self._lock:
                self.stats["in_flight"] -= 1

    def computed(self, seconds: float, read: bool) -> None:
        """A slot's time on one answer, and whether its client was still there to read it."""
        with self._lock:
            self.stats["busy_ms"] += round(seconds * 1000)
            self.stats["useful_ms" if read else "abandoned_ms"] += round(seconds * 1000)
            self.stats["answered" if read else "abandoned"] += 1

    def count(self, stat: str, n: int = 1) -> None:
        with self._lock:
            self.stats[stat] += n

    def props(self) -> dict | None:
        """llama.cpp's /props, where this server says it (config.props, or as llama.cpp)."""
        if not (self.config.props or self.config.server_kind == "llamacpp"):
            return None
        return server_kinds.llamacpp_props(
            self.config.slots or self.config.batch_slots or 1, self.config.context_tokens
        )

    def batching(self) -> BatchingCompute | None:
        """The batch that computes chat answers, where config.batch_slots asks for one."""
        cfg = self.config
        if not cfg.batch_slots:
            return None
        key = (cfg.batch_slots, cfg.batch_slowdown, tuple(cfg.capacity_at))
        with self._lock:
            if self._batching is None or self._batching[0] != key:
                self._batching = (key, BatchingCompute(cfg.batch_slots, cfg.batch_slowdown, cfg.capacity_at))
            return self._batching[1]

    def queue(self) -> tuple[int, int]:
        """(chat requests being computed, chat requests waiting for a place) now."""
        if (batch := self.batching()) is not None:
            return batch.counts()
        with self._lock:
            held = self._chat_in_flight
        slots = self.config.slots or held
        return min(held, slots), max(0, held - slots)

    @contextmanager
    def chat_request(self) -> Iterator[bool]:
        """A chat request held by the server while it is answered; yields False where the server
        refuses it at once, as TGI does beyond max_concurrent_requests."""
        with self._lock:
            limit = self.max_concurrent() if self.config.server_kind == "tgi" else None
            admitted = limit is None or self._chat_in_flight < limit
            if admitted:
                self._chat_in_flight += 1
            else:
                self.stats["overloaded"] += 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._chat_in_flight -= 1

    def max_concurrent(self) -> int:
        """TGI's max_concurrent_requests: the slots configured, else its default."""
        return self.config.batch_slots or self.config.slots or server_kinds.TGI_MAX_CONCURRENT

    def describe(self, method: str, path: str, body: dict) -> tuple[int, dict | str] | None:
        """The reply of a self-description endpoint of config.server_kind; None: not one."""
        kind, context, route = self.config.server_kind, self.config.context_tokens, path.split("?")[0].rstrip("/")
        if kind == "vllm" and method == "GET" and route.endswith("/models"):
            return 200, server_kinds.vllm_models(context)
        if kind == "vllm" and method == "GET" and route == "/metrics":
            return 200, server_kinds.vllm_metrics(*self.queue())
        if kind == "tgi" and method == "GET" and route == "/info":
            return 200, server_kinds.tgi_info(self.max_concurrent(), context)
        if kind == "ollama" and method == "POST" and route == "/api/show":
            model = body.get("model") or body.get("name")
            if not model:
                return 400, {"error": "model is required"}
            return 200, server_kinds.ollama_show(str(model), context)
        if kind == "litellm" and method == "GET" and route == "/model/info":
            return 200, server_kinds.litellm_model_info(context)
        return None

    def down(self) -> str | None:
        """The outage's kind while the simulator is down, counted as refused; else None."""
        with self._lock:
            outage = self._outage
            if outage is None or self.stats["requests"] < outage.after:
                return None
            if outage.started is None:
                outage.started = time.monotonic()
            if time.monotonic() - outage.started >= outage.seconds:
                self._outage = None
                return None
            self.stats["outage_refused"] += 1
            return outage.kind

    def start(self) -> Simulator:
        self.batching()  # capacity_at counts from here
        self._thread = threading.Thread(target=self._server.serve_forever, name="llm-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- answering ---------------------------------------------------------------------------

    def _next_fault(self, rng: random.Random) -> str | None:
        with self._lock:
            if self._script:
                return self._script.popleft()
        for kind, rate in self.config.fault_rates.items():
            if rng.random() < rate:
                return kind
        return None

    def answer(self, body: dict) -> tuple[int, dict, dict[str, str], float]:
        """(status, JSON body, headers, seconds to wait before answering) for one request."""
        messages = body.get("messages") or []
        if self.config.drops_system:
            messages = [m for m in messages if m.get("role") != "system"]
        text = "\n".join(m.get("content") or "" for m in messages if isinstance(m.get("content"), str))
        with self._lock:
            self.stats["requests"] += 1
            number = self.stats["requests"]
        fault = self._next_fault(random.Random(f"{self.config.seed}:{number}"))
        if fault == "flex_unavailable" and body.get("service_tier") != "flex":
            fault = None
        if fault:
            self._note(body, fault)
        if (refused := self._refused(body, fault)) is not None:
            return (*refused, self.config.latency_s)
        delay = self.config.hang_s if fault == "timeout" else self.config.latency_s
        prompt_tokens = self._tokens.count(text) + 4 * len(messages)
        if (overflow := self._overflow(body, fault, prompt_tokens)) is not None:
            return (*overflow, delay)
        reply, finish, completion_tokens, reasoning = self._reply(body, fault, messages, text, prompt_tokens)
        if self.config.tokens_per_s:
            delay += completion_tokens / self.config.tokens_per_s
        allowed, headers = self._admit(prompt_tokens + completion_tokens)
        if not allowed:
            self._note(body, "429_limit")
            return 429, _error("simulated rate limit reached", "rate_limit_exceeded"), headers, 0.0
        cached = self._served(body, messages, prompt_tokens, completion_tokens, reasoning)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        }
        response = {
            "id": f"chatcmpl-sim-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "simulator"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": finish}],
            "service_tier": "flex" if body.get("service_tier") == "flex" else "default",
            "usage": None if fault == "no_usage" else usage,
        }
        if not fault:
            self._note(body, "ok")
        with self._lock:
            self.stats["completions_" + finish] += 1
        return 200, response, headers, delay

    def _refused(self, body: dict, fault: str | None) -> tuple[int, dict, dict[str, str]] | None:
        """An error answered before any work: a fault, or a request the model does not take."""
        if fault == "flex_unavailable":
            return 429, _error("Resource unavailable: please retry later", "resource_unavailable"), {}
        retention = body.get("prompt_cache_retention")
        if retention not in (None, "in_memory", "24h") or (
            retention == "24h" and not RETENTION_24H.match(str(body.get("model")))
        ):
            self._note(body, "400")
            message = f"prompt_cache_retention {retention!r} is not supported with this model"
            return 400, _error(message, "invalid_request_error"), {}
        if fault in ("429", "insufficient_quota"):
            code = "rate_limit_exceeded" if fault == "429" else "insufficient_quota"
            retry = self.config.retry_after_s
            headers = {"retry-after-ms": str(int(retry * 1000)), "retry-after": str(max(1, round(retry)))}
            return 429, _error(f"simulated {code}", code), headers if fault == "429" else {}
        if fault in ("401", "400", "500", "503"):
            return int(fault), _error(f"simulated HTTP {fault}", None), {}
        return None

    def _overflow(self, body: dict, fault: str | None, prompt_tokens: int) -> tuple[int, dict, dict[str, str]] | None:
        """A prompt over the context: the error OpenAI answers, or llama.cpp's."""
        if not (
            fault == "context_length" or (self.config.context_tokens and prompt_tokens > self.config.context_tokens)
        ):
            return None
        if not fault:
            self._note(body, "context_length")
        if self.config.overflow_error == "llama.cpp":
            error = {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt_tokens,
                "n_ctx": self.config.context_tokens,
            }
            return 400, {"error": error}, {}
        message = f"This model's maximum context length is {self.config.context_tokens} tokens; the prompt has {prompt_tokens}."
        return 400, _error(message, "context_length_exceeded"), {}

    def _reply(
        self, body: dict, fault: str | None, messages: list[dict], text: str, prompt_tokens: int
    ) -> tuple[str, str, int, int]:
        """The reply, its finish reason, its completion tokens and the reasoning among them."""
        caps = [body[name] for name in self.config.reads_cap if isinstance(body.get(name), int)]
        cap = min(caps) if caps else None
        runaway = fault == "runaway" or self.config.runaway
        if runaway:
            room = (self.config.context_tokens - prompt_tokens) if self.config.context_tokens else None
            length = min(n for n in (cap, room, self.config.runaway_tokens) if n is not None)
            reply = self._tokens.truncate(RUNAWAY_TEXT * (length // 8 + 1), length)
        elif fault == "malformed":
            reply = "I would start with the third chunk."
        else:
            reply = self._rank(messages, text)
        finish = "stop"
        if cap is not None and self._tokens.count(reply) >= cap:
            reply, finish = self._tokens.truncate(reply, cap), "length"
        completion_tokens = self._tokens.count(reply)
        reasoning = 0
        if self.config.reasoning_share and not runaway:
            effort = body.get("reasoning_effort") or DEFAULT_EFFORT
            reasoning = round(self.config.reasoning_share.get(effort, 0.0) * prompt_tokens)
            if cap is not None:  # reasoning counts against the cap too
                reasoning = max(0, min(reasoning, cap - completion_tokens))
            completion_tokens += reasoning
        return reply, finish, completion_tokens, reasoning

    def _served(self, body: dict, messages: list[dict], prompt_tokens: int, completion: int, reasoning: int) -> int:
        """The request counted as served: its cached prompt tokens (and the ceiling's), the stats."""
        cached = ceiling = 0
        if self.prompt_cache is not None and self.ceiling_cache is not None:
            # The messages' contents in order, as the provider tokenizes the whole prompt.
            tokens = self._tokens.encode(
                "".join(m.get("content") or "" for m in messages if isinstance(m.get("content"), str))
            )
            retention = body.get("prompt_cache_retention") == "24h"
            key = body.get("prompt_cache_key")
            cached, _ = self.prompt_cache.serve(tokens, key, retention, ready_after_s=self.config.latency_s)
            cached = min(cached, prompt_tokens)
            ceiling = min(self.ceiling_cache.serve(tokens)[0], prompt_tokens)
        with self._lock:
            self.stats["prompt_tokens"] += prompt_tokens
            self.stats["cached_tokens"] += cached
            self.stats["ceiling_cached_tokens"] += ceiling
            self.stats["completion_tokens"] += completion
            self.stats["reasoning_tokens"] += reasoning
            self.served.append((time.monotonic(), prompt_tokens + completion))
        return cached

    def _admit(self, tokens: int) -> tuple[bool, dict[str, str]]:
        """Count the request against the limits (an exact sliding window); the x-ratelimit-*
        headers either way, and Retry-After when it is refused."""
        cfg = self.config
        if not (cfg.rpm or cfg.tpm):
            return True, {}
        with self._lock:
            now = time.monotonic()
            while self._window and self._window[0][0] <= now - cfg.window_s:
                self._window.popleft()
            used_requests, used_tokens = len(self._window), sum(t for _, t in self._window)
            over_requests = cfg.rpm is not None and used_requests + 1 > cfg.rpm
            over_tokens = cfg.tpm is not None and used_tokens + tokens > cfg.tpm
            if not (over_requests or over_tokens):
                self._window.append((now, tokens))
                used_requests, used_tokens = used_requests + 1, used_tokens + tokens
            headers: dict[str, str] = {}
            oldest = self._window[0][0] + cfg.window_s - now if self._window else 0.0
            for kind, limit, used in (("requests", cfg.rpm, used_requests), ("tokens", cfg.tpm, used_tokens)):
                if limit is not None:
                    headers |= {
                        f"x-ratelimit-limit-{kind}": str(limit),
                        f"x-ratelimit-remaining-{kind}": str(max(0, limit - used)),
                        f"x-ratelimit-reset-{kind}": f"{max(0.0, oldest):.3f}s",
                    }
            if over_requests or over_tokens:
                # The wait until enough of the window has slid by for this request.
                need = tokens - (cfg.tpm or 0) + used_tokens if over_tokens else 0
                wait, freed = 0.0, 0
                for at, t in self._window:
                    freed += t
                    wait = at + cfg.window_s - now
                    if freed >= need:
                        break
                if over_requests and cfg.rpm is not None:
                    wait = max(wait, self._window[used_requests - cfg.rpm][0] + cfg.window_s - now)
                headers |= {"retry-after-ms": str(int(max(wait, 0.01) * 1000)), "retry-after": str(max(1, round(wait)))}
                return False, headers
            return True, headers

    def embeddings(self, body: dict) -> tuple[int, dict, dict[str, str], float]:
        """Embeddings by the offline hashed embedder: deterministic, and close for close texts."""
        from prism.ranking.embeddings import local_embedder

        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        with self._lock:
            self.stats["requests"] += 1
            self.stats["embedding_requests"] += 1
        vectors = local_embedder("hashed").embed(texts) if texts else []
        tokens = sum(self._tokens.count_many(texts)) if texts else 0
        self._note(body, "ok")
        return (
            200,
            {
                "object": "list",
                "model": body.get("model", "simulator"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                    for i, v in enumerate(vectors)
                ],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
            {},
            self.config.latency_s,
        )

    def _rank(self, messages: list[dict], text: str) -> str:
        shape = re.search(r"Reply format: ([\w-]+)", text)
        if shape and shape.group(1) == "subquestions-json":
            question = (
                next((m["content"] for m in messages if m.get("role") == "user"), "").removeprefix("Question: ").strip()
            )
            return json.dumps({"sub_questions": [question]})
        if shape and shape.group(1) == "answer-json":
            return json.dumps({"answer": self._answer(text)})
        prompt = next(
            (
                m["content"]
                for m in messages
                if any(mk.format(0) in (m.get("content") or "") for mk in MARKERS.values())
            ),
            None,
        )
        if prompt is None:
            return "There are no numbered candidates to rank."
        task, question, candidates = split_prompt(prompt)
        if self.config.mode == "oracle":
            scores = self._oracle(question, candidates)
        else:
            ranker = document_lexical_ranker() if task == "documents" else LexicalRanker()
            ranking = ranker.rank(question, candidates, len(candidates))
            scores = [0.0] * len(candidates)
            for position, i in enumerate(ranking.indices):
                scores[i] = len(candidates) - position
        order = sorted(range(len(candidates)), key=lambda i: scores[i], reverse=True)
        if shape:
            return self._json_reply(shape.group(1), text, candidates, scores, order, question)
        wanted = re.findall(r"exactly (\d+)", text)
        n = min(int(wanted[-1]), len(candidates)) if wanted else len(candidates)
        return str(order[:n])

    def _json_reply(
        self, shape: str, text: str, candidates: list[str], scores: list, order: list[int], question: str
    ) -> str:
        """The agent roles' JSON, from the same scores the ranking replies use."""
        top, low = max(scores), min(scores)
        spread = (top - low) or 1
        if shape == "scores-json":
            return json.dumps(
                {
                    "scores": [
                        {"index": i, "score": round(1 + 9 * (scores[i] - low) / spread, 2), "reasoning": "simulated"}
                        for i in range(len(candidates))
                    ]
                }
            )
        if shape == "weights-json":
            from prism.models import FILING_TYPES

            raw = (
                [max(0.0, (scores[i] - low) / spread) for i in range(len(candidates))]
                if len(candidates) == 5
                else [1] * 5
            )
            share = [0.1 + 0.5 * r / (sum(raw) or 1) for r in raw]
            return json.dumps({"weights": {t: w / sum(share) for t, w in zip(FILING_TYPES, share)}})
        if shape == "keep-json":
            bounds = re.search(r"Keep between (\d+) and (\d+)", text)
            keep = int(bounds.group(2)) if bounds else len(candidates)
            return json.dumps({"keep": sorted(order[:keep])})
        picked = re.findall(r"Picked so far: (\[[\d, ]*\])", text)
        picked = json.loads(picked[-1]) if picked else []
        if self.config.mode == "oracle":
            relevant = [i for i in order if scores[i] >= 1]
        else:
            relevant = order[:2]
        if shape == "select-json":
            return json.dumps({"selected": relevant[:1] if relevant else []})
        if shape == "add-json":
            return json.dumps({"add": [i for i in relevant if i not in picked]})
        return "{}"

    def _answer(self, text: str) -> str:
        """The reference answer when a relevant passage is in the evidence; else a shrug."""
        found = re.search(r"Question: (.*?)\n\nEvidence:", text, re.S)
        question = found.group(1).strip() if found else ""
        table = self.grades.get(question, {})
        passages = re.findall(r"\[Passage \d+\] (.*?)(?=\n\n\[Passage \d+\] |\Z)", text, re.S)
        if self.config.mode == "oracle" and any(table.get(_fingerprint(p), 0) > 0 for p in passages):
            return self.answers.get(question, "The evidence settles it.")
        return passages[0][:200] if passages else "The evidence does not settle it."

    def _oracle(self, question: str, candidates: list[str]) -> list[float]:
        """Each candidate's grade, replaced by a random one with probability ``noise``; a
        tiny random part breaks ties. The draws depend on the question and the candidates
        alone, so the same request gets the same answer whatever the order of requests and
        wherever the prompt layout puts the question."""
        digest = hashlib.sha1("\0".join([question, *candidates]).encode()).hexdigest()
        rng = random.Random(f"{self.config.seed}:{digest}")
        table = self.grades.get(question, {})
        top = max(table.values(), default=0)
        scores = []
        for text in candidates:
            grade: float = table.get(_fingerprint(text), 0)
            if rng.random() < self.config.noise:
                grade = rng.uniform(0, top)
            scores.append(grade + rng.random() * 1e-6)
        return scores

    def _note(self, body: dict, outcome: str) -> None:
        messages = body.get("messages") or []
        system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
        with self._lock:
            self.stats[outcome] += 1
            self.requests.append(
                {
                    "model": body.get("model"),
                    "outcome": outcome,
                    "at": time.time(),
                    "system": system,
                    "user": user,
                    "caps": {k: body[k] for k in ("max_completion_tokens", "max_tokens") if k in body},
                    "assistant": next((m.get("content") for m in messages if m.get("role") == "assistant"), None),
                }
            )


def _fingerprint(text: str) -> str:
    return hashlib.sha1(" ".join(text.split())[:2000].encode()).hexdigest()


def _error(message: str, code: str | None) -> dict:
    return {"error": {"message": message, "type": code or "server_error", "code": code, "param": None}}


def _batch_route(path: str) -> bool:
    return bool(re.search(r"/(files|batches)(/|\?|$)", path))


def _waiting(connection: socket.socket) -> bool:
    """The client is still there: its connection is not closed."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return True
    try:
        return bool(connection.recv(1, socket.MSG_PEEK))
    except OSError:
        return False


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-request (killed, timed out) is no error of the server's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _computed(sim: Simulator, handler: BaseHTTPRequestHandler, answer, body: dict) -> tuple[int, dict, dict[str, str]]:
    """The reply, once the server has computed it through its slots or its batch (to its end,
    whether or not the client is still there)."""
    with sim.slot():
        status, payload, headers, delay = answer(body)
        started = time.monotonic()
        batch = sim.batching() if status == 200 and answer == sim.answer else None
        if batch is not None:
            took = batch.compute(delay)
        elif delay:
            time.sleep(delay)
        if sim.config.slots or batch is not None:
            read = _waiting(handler.connection)
            sim.computed(took if batch is not None else time.monotonic() - started, read)
            if read and status == 200:  # completed work: the prompt tokens of answers a client read
                sim.count("read_prompt_tokens", int((payload.get("usage") or {}).get("prompt_tokens") or 0))
    return status, payload, headers


def _reply(
    handler: BaseHTTPRequestHandler, status: int, payload: dict | bytes | str, headers: dict[str, str] | None
) -> None:
    raw = isinstance(payload, bytes)  # a file's content
    text = isinstance(payload, str)  # Prometheus metrics
    if isinstance(payload, bytes):
        data = payload
    else:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
    kind = "application/octet-stream" if raw else "text/plain; version=0.0.4" if text else "application/json"
    try:
        handler.send_response(status)
        handler.send_header("content-type", kind)
        handler.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout fault)
        pass


def _handler(sim: Simulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self._down():
                return
            if _batch_route(self.path):
                self._send_batch("GET", b"")
            elif (described := sim.describe("GET", self.path, {})) is not None:
                self._send(*described)
            elif self.path.rstrip("/") == "/props" and (props := sim.props()) is not None:
                self._send(200, props)
            elif self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "simulator", "object": "model"}]})
            else:
                self._send(404, _error("not found", None))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            route = self.path.rstrip("/")
            if self._down(length):
                return
            if _batch_route(self.path):
                self._send_batch("POST", self.rfile.read(length))
                return
            described = route == "/api/show"
            if not (described or route.endswith(("/chat/completions", "/embeddings"))):
                self._send(404, _error(f"no route {self.path}", None))
                return
            try:
                body = json.loads(self.rfile.read(length))
            except json.JSONDecodeError:
                self._send(400, _error("body is not JSON", None))
                return
            if described:
                self._send(*(sim.describe("POST", route, body) or (404, _error(f"no route {self.path}", None))))
                return
            if route.endswith("/embeddings"):
                self._send(*_computed(sim, self, sim.embeddings, body))
                return
            with sim.chat_request() as admitted:  # TGI refuses at once beyond its limit
                reply = _computed(sim, self, sim.answer, body) if admitted else (429, server_kinds.TGI_OVERLOADED, {})
            self._send(*reply)

        def _down(self, length: int = 0) -> bool:
            """Answer as a server that is down, when the simulator is: True if it did."""
            kind = sim.down()
            if kind is None:
                return False
            self.rfile.read(length)
            if kind == "refuse":
                self.close_connection = True  # no answer: the client sees the connection closed
            else:
                self._send(503, _error("simulated outage: the server is overloaded", "overloaded"))
            return True

        def _send_batch(self, method: str, body: bytes) -> None:
            status, payload = sim.batch.handle(method, self.path, self.headers, body)
            self._send(status, payload)

        def _send(self, status: int, payload: dict | bytes | str, headers: dict[str, str] | None = None) -> None:
            _reply(self, status, payload, headers)

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

    return Handler


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="OpenAI-compatible ranking simulator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--mode", choices=("lexical", "oracle"), default="lexical")
    parser.add_argument("--queries", nargs="*", default=[], help="input files whose qrels the oracle answers from")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault", action="append", default=[], metavar="KIND=RATE", help=f"KIND in {FAULTS}")
    parser.add_argument("--context", type=int, default=None, help="the model's context, in tokens")
    parser.add_argument("--slots", type=int, default=None, help="requests computed at once; the rest queue (llama.cpp)")
    parser.add_argument("--props", action="store_true", help="say the slots and context at /props, as llama.cpp does")
    parser.add_argument(
        "--batch-slots",
        type=int,
        default=None,
        metavar="N",
        help="requests computed at once as one batch, each slower as more run together: its time alone "
        "(--latency, --tokens-per-s) x (1 + SLOWDOWN x (k - 1)) while k run; the rest queue in arrival "
        "order; an abandoned answer is computed to its end (vLLM, TGI). Slots are said only with --props",
    )
    parser.add_argument(
        "--batch-slowdown",
        type=float,
        default=BATCH_SLOWDOWN,
        metavar="SLOWDOWN",
        help=f"what each request running beside it adds to a request's time (default {BATCH_SLOWDOWN}: a batch of 16 "
        "takes 1.75 times as long as one request alone)",
    )
    parser.add_argument(
        "--capacity-at",
        action="append",
        default=[],
        metavar="T:N",
        help="from T seconds after the start, at most N computed at once in the batch (another tenant arrived); "
        "repeatable",
    )
    parser.add_argument(
        "--server-kind",
        choices=server_kinds.SERVER_KINDS,
        default=None,
        help="answer as this server says what it is: /props, /v1/models and /metrics, /info, /api/show, /model/info",
    )
    parser.add_argument("--reads-cap", choices=("both", "max_tokens", "max_completion_tokens"), default="both")
    parser.add_argument("--runaway", action="store_true", help="every reply generates up to the cap or the context")
    parser.add_argument("--tokens-per-s", type=float, default=None, help="generation speed")
    parser.add_argument("--drops-system", action="store_true", help="the chat format drops the system prompt")
    parser.add_argument("--reasoning", action="store_true", help="report reasoning tokens (REASONING_SHARES)")
    parser.add_argument("--cache-machines", type=int, default=4, help="machines, each with its prompt cache; 0: none")
    return parser


def _capacity_at(values: list[str]) -> tuple[tuple[float, int], ...]:
    changes = []
    for value in values:
        at, _, slots = value.partition(":")
        try:
            changes.append((float(at), int(slots)))
        except ValueError:
            raise SystemExit(f"--capacity-at {value!r}: expected SECONDS:SLOTS, e.g. 30:8") from None
    return tuple(changes)


def main(argv: list[str] | None = None) -> None:
    from prism.datasets import load_queries

    args = _parser().parse_args(argv)
    rates = {k: float(v) for k, v in (f.split("=", 1) for f in args.fault)}
    config = SimulatorConfig(
        args.mode,
        args.latency,
        args.noise,
        args.seed,
        rates,
        context_tokens=args.context,
        slots=args.slots,
        props=args.props,
        batch_slots=args.batch_slots,
        batch_slowdown=args.batch_slowdown,
        capacity_at=_capacity_at(args.capacity_at),
        server_kind=args.server_kind,
        reads_cap=("max_completion_tokens", "max_tokens") if args.reads_cap == "both" else (args.reads_cap,),
        runaway=args.runaway,
        tokens_per_s=args.tokens_per_s,
        drops_system=args.drops_system,
        cache=CacheModel(machines=args.cache_machines) if args.cache_machines else None,
        reasoning_share=REASONING_SHARES if args.reasoning else None,
    )
    sim = Simulator(config, args.host, args.port)
    for path in args.queries:
        sim.add_queries(load_queries(path))
    print(f"simulator on {sim.url} ({args.mode}, {len(sim.grades)} known questions)", flush=True)
    try:
        sim._server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
