"""One rate limit for the whole fleet: requests and tokens per (endpoint, model), counted in
Redis by every worker process on every host.

Each limit is an exact sliding window, as providers count: a log of what each request took and
when (a sorted set, with its running sum), updated by one Lua script per request for all of a
model's limits at once. Approximations undercount: the ``limits`` library's sliding-window
counter spreads the previous window's use evenly over it, so after a pause in traffic it admits
requests the provider still refuses (429s in a row, measured by bench/saturation.py), and its
exact moving window keeps one entry per unit, which millions of tokens rule out. A request
reserves its estimated tokens before it goes; once answered, its own entry is set to what the
provider counted (so an overrun is never left out and a refund leaves with the request), and
when the provider's x-ratelimit-remaining-* headers say less is left than we count, the
difference is taken. An entry stays a little longer than the window (``EDGE_S``): the request
reaches the provider a moment after it is counted here.

A cached prompt prefix (a ``prompt_key``: one filing segment for one model) is scheduled so that
the provider's cache is hit: the first request of a key goes alone and, once it has succeeded,
marks the key warm; the others wait for that mark (a short while here, then the job is deferred
and comes back), and all of them go under a per-key rate, above which the provider would spread
them over machines whose caches are cold.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from prism.llm import RateLimited, Reservation
from prism.llm.adaptive import Sample
from prism.llm.endpoints import InFlight, ModelLimits, Rate, parse_rate
from workers import keys
from workers.slots import FleetSlots, LocalSlots, RedisSlots

if TYPE_CHECKING:  # the client is given: settings load this module's ModelLimits without loading redis
    import redis

EDGE_S = 0.1  # how much longer than its window an entry is kept


# KEYS: a log and its sum per limit; ARGV: the entry's id, "force" or "", then per limit its
# window (ms), amount allowed and amount taken. Returns 0 when taken, else the ms to wait.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function amount_of(member) return tonumber(string.match(member, ':(%-?%d+)$')) end
local wait = 0
for i = 1, #KEYS / 2 do
  local log, sum = KEYS[2 * i - 1], KEYS[2 * i]
  local window, limit, amount = tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  local gone = redis.call('ZRANGEBYSCORE', log, '-inf', now - window)
  if #gone > 0 then
    local freed = 0
    for _, m in ipairs(gone) do freed = freed + amount_of(m) end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
    redis.call('DECRBY', sum, freed)
  end
  local over = tonumber(redis.call('GET', sum) or '0') + amount - limit
  if over > 0 and ARGV[2] ~= 'force' then
    local entries, freed = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES'), 0
    for j = 1, #entries, 2 do
      freed = freed + amount_of(entries[j])
      if freed >= over or j + 2 > #entries then
        wait = math.max(wait, tonumber(entries[j + 1]) + window - now)
        break
      end
    end
  end
end
if wait > 0 then return wait end
for i = 1, #KEYS / 2 do
  local log, sum, window, amount = KEYS[2 * i - 1], KEYS[2 * i], tonumber(ARGV[3 * i]), ARGV[3 * i + 2]
  redis.call('ZADD', log, now, ARGV[1] .. ':' .. amount)
  redis.call('INCRBY', sum, amount)
  redis.call('PEXPIRE', log, window)
  redis.call('PEXPIRE', sum, window)
end
return 0
"""

# KEYS: a log and its sum; ARGV: the entry's id, its amount, the amount it takes now.
_SET = """
local old = ARGV[1] .. ':' .. ARGV[2]
local at = redis.call('ZSCORE', KEYS[1], old)
if not at then return 0 end
redis.call('ZREM', KEYS[1], old)
redis.call('ZADD', KEYS[1], at, ARGV[1] .. ':' .. ARGV[3])
redis.call('INCRBY', KEYS[2], tonumber(ARGV[3]) - tonumber(ARGV[2]))
return 1
"""


class RedisWindows:
    """The logs in Redis, shared by the fleet."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._take, self._set = client.register_script(_TAKE), client.register_script(_SET)

    def take(self, name: str, limits: list[tuple[str, Rate, int]], entry: str, force: bool = False) -> float:
        """Take every (kind, rate, amount) at once, or none: seconds to wait (0: taken)."""
        names = [k for kind, _, _ in limits for k in (keys.limiter_log(name, kind), keys.limiter_sum(name, kind))]
        args: list = [entry, "force" if force else ""]
        for _, rate, amount in limits:
            args += [int((rate.seconds + EDGE_S) * 1000), rate.amount, amount]
        return int(self._take(keys=names, args=args)) / 1000

    def set(self, name: str, kind: str, entry: str, amount: int, now_amount: int) -> None:
        self._set(keys=[keys.limiter_log(name, kind), keys.limiter_sum(name, kind)], args=[entry, amount, now_amount])

    def used(self, name: str, kind: str) -> int:
        return int(self.client.get(keys.limiter_sum(name, kind)) or 0)


class LocalWindows:
    """The same logs in this process, for an embedded run (no Redis)."""

    def __init__(self) -> None:
        self._logs: dict[str, deque[tuple[float, str]]] = {}  # log -> (time, entry), the oldest first
        self._entries: dict[tuple[str, str], int] = {}  # (log, entry) -> amount
        self._lock = threading.Lock()

    def _prune(self, log: str, rate: Rate, now: float) -> deque[tuple[float, str]]:
        entries = self._logs.setdefault(log, deque())
        while entries and entries[0][0] <= now - rate.seconds - EDGE_S:
            _, entry = entries.popleft()
            self._entries.pop((log, entry), None)
        return entries

    def _sum(self, log: str, entries: deque[tuple[float, str]]) -> int:
        return sum(self._entries.get((log, e), 0) for _, e in entries)

    def take(self, name: str, limits: list[tuple[str, Rate, int]], entry: str, force: bool = False) -> float:
        with self._lock:
            now, wait = time.monotonic(), 0.0
            for kind, rate, amount in limits:
                log = keys.limiter_log(name, kind)
                entries = self._prune(log, rate, now)
                over = self._sum(log, entries) + amount - rate.amount
                if over > 0 and not force:
                    freed, at = 0, now
                    for entry_at, e in entries:  # the oldest first, until enough has left
                        freed, at = freed + self._entries.get((log, e), 0), entry_at
                        if freed >= over:
                            break
                    wait = max(wait, at + rate.seconds + EDGE_S - now)
            if wait > 0:
                return wait
            for kind, _, amount in limits:
                self._logs[keys.limiter_log(name, kind)].append((now, entry))
                self._entries[(keys.limiter_log(name, kind), entry)] = amount
            return 0.0

    def set(self, name: str, kind: str, entry: str, amount: int, now_amount: int) -> None:
        with self._lock:
            if (keys.limiter_log(name, kind), entry) in self._entries:
                self._entries[(keys.limiter_log(name, kind), entry)] = now_amount

    def used(self, name: str, kind: str) -> int:
        with self._lock:
            log = keys.limiter_log(name, kind)
            return self._sum(log, self._logs.get(log, deque()))


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
        client: redis.Redis | None,
        limits: Mapping[str, ModelLimits],
        max_block_s: float = 5.0,
        headroom: float = 1.0,
        prompt_rpm: int = 15,
        warmup_ttl_s: int = 600,
    ):
        self.windows = RedisWindows(client) if client is not None else LocalWindows()
        self.slots = FleetSlots(RedisSlots(client) if client is not None else LocalSlots(), max_block_s)
        self.max_block_s = max_block_s
        self.rates: dict[str, dict[str, Rate]] = {}
        for model, spec in limits.items():
            for kind in ("requests", "tokens"):
                if text := getattr(spec, kind):
                    rate = parse_rate(text)
                    # stay under the provider's exact window by this share
                    self.rates.setdefault(model, {})[kind] = Rate(max(1, int(rate.amount * headroom)), rate.seconds)
        self._waited_s = 0.0  # time spent blocked here
        self.prompt_rate = Rate(prompt_rpm, 60)
        self.marks = WarmMarks(client)
        self.warmup_ttl_s = warmup_ttl_s  # a warm-up claim lapses after this, should its holder die
        self._warming: dict[str, int] = {}  # key -> the thread that holds its warm-up

    @property
    def waited_s(self) -> float:
        """Time spent blocked here and waiting for slots, for the metrics (which set it to 0)."""
        return self._waited_s + self.slots.waited_s

    @waited_s.setter
    def waited_s(self, value: float) -> None:
        self._waited_s, self.slots.waited_s = value, 0.0

    def slot(self, endpoint: str, model: str, limit: InFlight) -> AbstractContextManager[int]:
        return self.slots.slot(endpoint, model, limit)

    def answered(self, endpoint: str, model: str, limit: InFlight, sample: Sample) -> None:
        self.slots.answered(endpoint, model, limit, sample)

    def _rates(self, model: str) -> dict[str, Rate]:
        return self.rates.get(model) or self.rates.get("*") or {}

    def acquire(self, endpoint: str, model: str, tokens: int, prompt_key: str | None = None) -> Reservation:
        """Take one request and ``tokens`` tokens, waiting up to ``max_block_s``; a longer wait
        raises RateLimited so the task can step aside and come back later."""
        started, reservation = time.monotonic(), Reservation(endpoint, model, tokens, prompt_key, uuid.uuid4().hex)
        if prompt_key is not None:
            self._prompt(reservation, started)
        try:
            self._take(reservation, started)
        except RateLimited:
            self._release(prompt_key, ok=False)
            raise
        return reservation

    def _wait(self, name: str, limits: list[tuple[str, Rate, int]], entry: str, started: float, why: str) -> None:
        while wait := self.windows.take(name, limits, entry):
            if time.monotonic() - started + wait > self.max_block_s:
                self._waited_s += time.monotonic() - started
                raise RateLimited(max(wait, 0.5), why)
            time.sleep(min(wait, 0.5))
        self._waited_s += time.monotonic() - started

    def _prompt(self, r: Reservation, started: float) -> None:
        """Wait for the key's warm-up (or take it), then a place under the per-key rate."""
        key = r.prompt_key or ""
        while not self.marks.warm(key) and self._warming.get(key) != threading.get_ident():
            if self.marks.claim(key, self.warmup_ttl_s):
                self._warming[key] = threading.get_ident()
                break
            if time.monotonic() - started + 0.1 > self.max_block_s:
                self._waited_s += time.monotonic() - started
                raise RateLimited(1.0, "another request is warming this prompt's cache")
            time.sleep(0.1)
        try:
            self._wait(f"prompt:{key}", [("requests", self.prompt_rate, 1)], r.id, started, "per-prompt rate reached")
        except RateLimited:
            self._release(key, ok=False)
            raise

    def _take(self, r: Reservation, started: float) -> None:
        rates = self._rates(r.model)
        if not rates:
            return
        cost = {"requests": 1, "tokens": r.tokens}
        for kind, rate in rates.items():
            if cost[kind] > rate.amount:
                raise ValueError(f"one request of {cost[kind]} {kind} is over the {r.model} limit of {rate.amount}")
        limits = [(kind, rate, cost[kind]) for kind, rate in rates.items()]
        self._wait(f"{r.endpoint}:{r.model}", limits, r.id, started, f"fleet limit for {r.model} reached")

    def _release(self, key: str | None, ok: bool) -> None:
        if key is not None and self._warming.get(key) == threading.get_ident():
            del self._warming[key]
            self.marks.done(key, ok)

    def settle(self, r: Reservation, used: int | None, headers: Mapping[str, str]) -> None:
        # Answered (used > 0): the prefix is in the provider's cache now; refused: let another try.
        self._release(r.prompt_key, ok=bool(used))
        rates, name = self._rates(r.model), f"{r.endpoint}:{r.model}"
        if "tokens" in rates and used is not None and used != r.tokens:
            self.windows.set(name, "tokens", r.id, r.tokens, used)
        for kind, rate in rates.items():
            remaining, limit = (headers.get(f"x-ratelimit-{what}-{kind}") for what in ("remaining", "limit"))
            if remaining is None:
                continue
            counted = int(float(limit or rate.amount)) - int(float(remaining))  # by the provider
            behind = counted - self.windows.used(name, kind)
            if behind > 0:  # the provider counts more than we do: take the difference
                self.windows.take(name, [(kind, rate, min(behind, rate.amount))], uuid.uuid4().hex, force=True)
