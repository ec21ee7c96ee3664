"""The provider's prompt cache, as the simulator models it.

A prompt of at least ``min_tokens`` tokens is cached by exact prefix, in ``block_tokens`` steps
past that minimum, on one machine: requests are routed by a hash of their first
``route_tokens`` tokens together with the ``prompt_cache_key``; above ``route_rpm`` requests per
``window_s`` on one route, traffic spills over to the next machine, whose cache is cold. A cached
prefix lapses after ``idle_s`` without a hit (``long_s`` with 24 h retention), and becomes
readable only once the request that wrote it has been read in (``ready_after_s``): two requests
sent together both miss. Deterministic for a given sequence of requests and clock.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_BLOCKS = 200_000  # cached prefixes a machine holds


@dataclass
class CacheModel:
    machines: int = 4
    min_tokens: int = 1024
    block_tokens: int = 128
    route_tokens: int = 256
    route_rpm: int = 15
    window_s: float = 60.0
    idle_s: float = 300.0  # in-memory retention: 5-10 min idle at the provider
    long_s: float = 24 * 3600.0  # prompt_cache_retention="24h"

    @classmethod
    def ceiling(cls) -> CacheModel:
        """One machine that never spills nor forgets: the most any schedule could have cached."""
        return cls(machines=1, route_rpm=2**62, idle_s=float("inf"), long_s=float("inf"))


class PromptCache:
    def __init__(self, model: CacheModel | None = None, clock: Callable[[], float] = time.monotonic):
        self.model = model or CacheModel()
        self.clock = clock
        # Per machine: digest of a cached prefix -> (readable from, expires at).
        self._machines: list[dict[bytes, tuple[float, float]]] = [{} for _ in range(self.model.machines)]
        self._routes: dict[bytes, deque[float]] = {}
        self._lock = threading.Lock()
        self.spills = 0

    def serve(
        self, tokens: Sequence[int], key: str | None = None, long: bool = False, ready_after_s: float = 0.0
    ) -> tuple[int, int]:
        """(cached tokens, machine) for one request, and its prefix written to that machine."""
        m = self.model
        route = hashlib.sha256(array("I", tokens[: m.route_tokens]).tobytes() + (key or "").encode()).digest()
        with self._lock:
            now = self.clock()
            times = self._routes.setdefault(route, deque())
            while times and times[0] <= now - m.window_s:
                times.popleft()
            spill = len(times) // m.route_rpm
            self.spills += spill > 0
            times.append(now)
            machine = (int.from_bytes(route[:8], "big") + spill) % m.machines
            if len(tokens) < m.min_tokens:
                return 0, machine
            cache = self._machines[machine]
            if len(cache) > MAX_BLOCKS:
                # Full, as a machine's memory is: the expired go, then the oldest written, down to
                # half, so that a long run pays for this once in a while, not on every request.
                for stale in [d for d, (_, end) in cache.items() if end <= now]:
                    del cache[stale]
                for oldest in list(itertools.islice(cache, max(0, len(cache) - MAX_BLOCKS // 2))):
                    del cache[oldest]
            cached, hit_run = 0, True
            digest, start = hashlib.sha256(), 0
            expires = now + (m.long_s if long else m.idle_s)
            for end in range(m.min_tokens, len(tokens) + 1, m.block_tokens):
                digest.update(array("I", tokens[start:end]).tobytes())
                start = end
                name = digest.digest()  # of the whole prefix up to `end`
                entry = cache.get(name)
                if hit_run and entry is not None and entry[0] <= now < entry[1]:
                    cached = end
                    cache[name] = (entry[0], expires)  # a hit keeps it alive
                else:
                    hit_run = False
                    ready = now + ready_after_s
                    if entry is not None and entry[0] <= now < entry[1]:
                        ready = entry[0]
                    cache[name] = (ready, expires)
            return cached, machine
