"""One rate limit for the whole fleet: requests and tokens per (endpoint, model), counted in
Redis by every worker process on every host.

Built on ``limits`` (its sliding-window counter: two counters per limit, one atomic Lua script
per hit, so a tokens/min limit costs the same as a requests/min one; its moving window keeps one
list entry per unit and is unusable for millions of tokens). A request reserves its estimated
tokens before it goes; once answered, the unused part is handed back (a negative cost) and,
when the provider's x-ratelimit-remaining-* headers say less is left than we count, the
difference is taken, so the fleet follows the provider.
"""

from __future__ import annotations

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


class FleetLimiter:
    def __init__(
        self, storage_uri: str, limits: Mapping[str, ModelLimits], max_block_s: float = 5.0, headroom: float = 1.0
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

    def _limits(self, model: str) -> dict[str, RateLimitItem]:
        return self.items.get(model) or self.items.get("*") or {}

    def acquire(self, endpoint: str, model: str, tokens: int) -> None:
        """Take one request and ``tokens`` tokens, waiting up to ``max_block_s``; a longer wait
        raises RateLimited so the task can step aside and come back later."""
        items = self._limits(model)
        if not items:
            return
        cost = {"requests": 1, "tokens": tokens}
        started = time.monotonic()
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

    def settle(self, endpoint: str, model: str, reserved: int, used: int | None, headers: Mapping[str, str]) -> None:
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
