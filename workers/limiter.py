"""One rate limit for the whole fleet: requests and tokens per (endpoint, model), counted in
Redis by every worker process on every host.

Built on ``limits`` (its sliding-window counter: two counters per limit, one atomic Lua script
per hit, so a tokens/min limit costs the same as a requests/min one; its moving window keeps one
list entry per unit and is unusable for millions of tokens). A request reserves its estimated
tokens before it goes; once answered, the unused part is handed back (a negative cost) and,
when the provider's x-ratelimit-remaining-* headers say less is left than we count, the
difference is taken, so the fleet follows the provider.

A cached prompt prefix (a ``prompt_key``: one filing segment for one model) is scheduled so that
the provider's cache is hit: the first request of a key goes alone and, once it has succeeded,
marks the key warm; the others wait for that mark (a short while here, then the job is deferred
and comes back), and all of them go under a per-key rate, above which the provider would spread
them over machines whose caches are cold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from limits import RateLimitItem, parse
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter
from pydantic import BaseModel

from prism.llm import RateLimited
from workers import keys


class ModelLimits(BaseModel):
    """In limits' notation, e.g. ``{"requests": "500/minute", "tokens": "200000/minute"}``."""

    requests: str | None = None
    tokens: str | None = None


class WarmMarks:
    """Which prompt keys are warm at the provider, and which are being warmed: in Redis, shared
    by the fleet; in this process when there is no Redis (an embedded run)."""

    def __init__(self, client=None):
        self.client = client
        self._local: dict[str, float] = {}
        self._lock = threading.Lock()

    def warm(self, key: str) -> bool:
        if self.client is not None:
            return bool(self.client.exists(keys.prompt_warm(key)))
        return self._local.get(keys.prompt_warm(key), 0) > time.time()

    def claim(self, key: str, ttl_s: int) -> bool:
        """Take the warm-up of this key; False when another request holds it."""
        name = keys.prompt_warming(key)
        if self.client is not None:
            return bool(self.client.set(name, 1, nx=True, ex=ttl_s))
        with self._lock:
            if self._local.get(name, 0) > time.time():
                return False
            self._local[name] = time.time() + ttl_s
            return True

    def done(self, key: str, ok: bool) -> None:
        """The warm-up ended: mark the key warm when it succeeded, and free the claim."""
        if self.client is not None:
            if ok:
                self.client.set(keys.prompt_warm(key), 1, ex=keys.PROMPT_WARM_TTL_S)
            self.client.delete(keys.prompt_warming(key))
            return
        with self._lock:
            if ok:
                self._local[keys.prompt_warm(key)] = time.time() + keys.PROMPT_WARM_TTL_S
            self._local.pop(keys.prompt_warming(key), None)


class FleetLimiter:
    def __init__(
        self,
        storage_uri: str,
        limits: Mapping[str, ModelLimits],
        max_block_s: float = 5.0,
        headroom: float = 1.0,
        prompt_rpm: int = 15,
        marks=None,
        warmup_ttl_s: int = 600,
    ):
        self.storage = storage_from_string(storage_uri, key_prefix=keys.LIMITER_PREFIX)
        self.strategy = SlidingWindowCounterRateLimiter(self.storage)
        self.max_block_s = max_block_s
        self.items: dict[str, dict[str, RateLimitItem]] = {}
        for model, spec in limits.items():
            for kind in ("requests", "tokens"):
                if text := getattr(spec, kind):
                    item = parse(text)
                    if headroom < 1:  # stay under the provider's exact window by this share
                        item = type(item)(max(1, int(item.amount * headroom)), item.multiples, item.namespace)
                    self.items.setdefault(model, {})[kind] = item
        self.waited_s = 0.0  # time spent blocked here, for the metrics
        self.prompt_item = parse(f"{prompt_rpm}/minute")
        self.marks = WarmMarks(marks)
        self.warmup_ttl_s = warmup_ttl_s  # a warm-up claim lapses after this, should its holder die
        self._warming: dict[str, int] = {}  # key -> the thread that holds its warm-up

    def _limits(self, model: str) -> dict[str, RateLimitItem]:
        return self.items.get(model) or self.items.get("*") or {}

    def acquire(self, endpoint: str, model: str, tokens: int, prompt_key: str | None = None) -> None:
        """Take one request and ``tokens`` tokens, waiting up to ``max_block_s``; a longer wait
        raises RateLimited so the task can step aside and come back later."""
        started = time.monotonic()
        if prompt_key is not None:
            self._prompt(prompt_key, started)
        try:
            self._acquire(endpoint, model, tokens, started)
        except RateLimited:
            self._release(prompt_key, ok=False)
            raise

    def _prompt(self, key: str, started: float) -> None:
        """Wait for the key's warm-up (or take it), then a place under the per-key rate."""
        while not self.marks.warm(key) and self._warming.get(key) != threading.get_ident():
            if self.marks.claim(key, self.warmup_ttl_s):
                self._warming[key] = threading.get_ident()
                break
            if time.monotonic() - started + 0.1 > self.max_block_s:
                self.waited_s += time.monotonic() - started
                raise RateLimited(1.0, "another request is warming this prompt's cache")
            time.sleep(0.1)
        while not self.strategy.hit(self.prompt_item, "prompt", key):
            reset = self.strategy.get_window_stats(self.prompt_item, "prompt", key).reset_time
            wait = max(0.05, reset - time.time())
            if time.monotonic() - started + wait > self.max_block_s:
                self.waited_s += time.monotonic() - started
                self._release(key, ok=False)
                raise RateLimited(max(wait, 0.5), "per-prompt rate reached")
            time.sleep(min(wait, 0.5))

    def _release(self, key: str | None, ok: bool) -> None:
        if key is not None and self._warming.get(key) == threading.get_ident():
            del self._warming[key]
            self.marks.done(key, ok)

    def _acquire(self, endpoint: str, model: str, tokens: int, started: float) -> None:
        items = self._limits(model)
        if not items:
            return
        cost = {"requests": 1, "tokens": tokens}
        for kind, item in items.items():
            if cost[kind] > item.amount:
                raise ValueError(f"one request of {cost[kind]} {kind} is over the {model} limit of {item}")
        while True:
            taken = []
            for kind, item in items.items():
                if self.strategy.hit(item, endpoint, model, cost=cost[kind]):
                    taken.append(kind)
                    continue
                for done in taken:  # hand back what this round took
                    self.strategy.hit(items[done], endpoint, model, cost=-cost[done])
                break
            else:
                self.waited_s += time.monotonic() - started
                return
            wait = self._wait(items, endpoint, model)
            if time.monotonic() - started + wait > self.max_block_s:
                self.waited_s += time.monotonic() - started
                raise RateLimited(max(wait, 0.5), f"fleet limit for {model} reached")
            time.sleep(min(wait, 0.5))

    def _wait(self, items: dict[str, RateLimitItem], endpoint: str, model: str) -> float:
        resets = [self.strategy.get_window_stats(item, endpoint, model).reset_time for item in items.values()]
        return max(0.05, max(resets) - time.time())

    def settle(
        self,
        endpoint: str,
        model: str,
        reserved: int,
        used: int | None,
        headers: Mapping[str, str],
        prompt_key: str | None = None,
    ) -> None:
        # Answered (used > 0): the prefix is in the provider's cache now; refused: let another try.
        self._release(prompt_key, ok=bool(used))
        items = self._limits(model)
        tokens = items.get("tokens")
        if tokens is not None and used is not None and used != reserved:
            # A refund always lands; an overdraft may find the window full and is then left out.
            self.strategy.hit(tokens, endpoint, model, cost=used - reserved)
        for kind, item in items.items():
            remaining = headers.get(f"x-ratelimit-remaining-{kind}")
            if remaining is None:
                continue
            ours = self.strategy.get_window_stats(item, endpoint, model).remaining
            behind = ours - int(float(remaining))
            if behind > 0:
                self.strategy.hit(item, endpoint, model, cost=min(behind, item.amount))
