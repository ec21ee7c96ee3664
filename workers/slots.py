"""Requests in flight per (endpoint, model), for the whole fleet, and the limit they keep to.

The requests are a semaphore of leases: in Redis for the fleet (each holder with its lease's end
as score, so the slot of a worker killed mid-request comes back when its lease lapses), in this
process for an embedded run. A request holds its slot while its attempt runs and renews it
meanwhile; it waits for one before it is sent, so the wait is never part of its timeout.

The limit is fixed (PRISM_LLM_CONCURRENCY; a hosted API has none) or, for a server a team runs,
adapts (prism.llm.adaptive). Then every process reports how each attempt ended, beside the
semaphore, and one controller steers: whichever process holds the lead, a lease renewed at each
decision. It reads the reports, decides once every ``PACE_S`` and publishes the limit and why.
A process that stops deciding (its run ended, it was killed) loses the lead within
``keys.SLOTS_LEAD_S``; the next process to take a slot or report an answer takes it up, from the
limit published. So the limit is steered after ``prism enqueue`` has exited, and never by two
processes at once.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prism.llm import RateLimited
from prism.llm.adaptive import AdaptiveLimit, Sample
from prism.llm.endpoints import InFlight
from prism.llm.serverinfo import queue_waiting
from workers import keys

if TYPE_CHECKING:
    import redis

SLOT_POLL_S = 0.05  # how often a request waiting for a slot asks again
PACE_S = 1.0  # how often the controller decides
ADAPTIVE = -1  # as a cap: the limit published, else the start


@dataclass(frozen=True)
class SlotsNow:
    """An (endpoint, model)'s slots in use, its limit and, where it adapts, why it is that."""

    held: int
    limit: int
    reason: str | None = None


# KEYS: the holders, the cap in use and the published limit; ARGV: the holder, the cap (ADAPTIVE:
# the published limit, else ARGV[4], within ARGV[5]) and the lease (ms). Returns the requests in
# flight with this one when the slot is held (taken now or renewed), else 0; and the cap applied.
_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
local cap = tonumber(ARGV[2])
if cap < 0 then
  cap = math.min(tonumber(redis.call('HGET', KEYS[3], 'limit') or ARGV[4]), tonumber(ARGV[5]))
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('SET', KEYS[2], cap, 'PX', lease * 4)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < cap then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], lease * 4)
  return {redis.call('ZCARD', KEYS[1]), cap}
end
return {0, cap}
"""

# KEYS: the lead; ARGV: the process, the lease (ms). 1: this process steers.
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


def _sample_line(sample: Sample, ended_at: float) -> str:
    return json.dumps(
        [sample.latency_s, sample.prompt_tokens, sample.output_tokens, sample.outcome, sample.in_flight, ended_at]
    )


def _sample_of(line: str | bytes) -> tuple[Sample, float]:
    latency, prompt, output, outcome, in_flight, ended_at = json.loads(line)
    return Sample(latency, prompt, output, outcome, in_flight), ended_at


class RedisSlots:
    """The fleet's slots, limits and reports, in Redis."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._take, self._lead = client.register_script(_SLOT), client.register_script(_LEAD)

    def take(self, name: str, holder: str, cap: int, start: int = 1, ceiling: int = 0) -> tuple[int, int]:
        """(requests in flight with this one, 0 where none is free; the cap applied)."""
        names = [keys.slots(name), keys.slots_cap(name), keys.slots_limit(name)]
        lease_ms = int(keys.SLOT_LEASE_S * 1000)
        in_flight, applied = self._take(keys=names, args=[holder, cap, lease_ms, start, ceiling])
        return int(in_flight), int(applied)

    def release(self, name: str, holder: str) -> None:
        self.client.zrem(keys.slots(name), holder)

    def in_use(self) -> dict[str, SlotsNow]:
        """Each (endpoint, model) in use lately: its slots held, its limit and why."""
        out = {}
        for name, key in self._named(":cap"):
            held = self.client.zcount(keys.slots(name), time.time() * 1000, "+inf")
            reason = self.client.hget(keys.slots_limit(name), "reason")
            said = reason.decode() if isinstance(reason, bytes) else reason
            out[name] = SlotsNow(int(held), int(self.client.get(key) or 0), said)
        return out

    def _named(self, suffix: str) -> Iterator[tuple[str, str]]:
        """(name, key) of each (endpoint, model)'s key ending in ``suffix``."""
        for key in self.client.scan_iter(match=keys.slots(f"*{suffix}")):
            text = key.decode() if isinstance(key, bytes) else key
            yield text.removeprefix(keys.slots("")).removesuffix(suffix), text

    def report(self, name: str, sample: Sample, ended_at: float) -> None:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.rpush(keys.slots_answers(name), _sample_line(sample, ended_at))
            pipe.ltrim(keys.slots_answers(name), -keys.SLOTS_ANSWERS_KEPT, -1)
            pipe.expire(keys.slots_answers(name), keys.SLOTS_TTL_S)
            pipe.execute()

    def drain(self, name: str) -> list[tuple[Sample, float]]:
        with self.client.pipeline(transaction=True) as pipe:
            pipe.lrange(keys.slots_answers(name), 0, -1)
            pipe.delete(keys.slots_answers(name))
            lines, _ = pipe.execute()
        return [_sample_of(line) for line in lines]

    def lead(self, name: str, process: str) -> bool:
        return bool(self._lead(keys=[keys.slots_lead(name)], args=[process, int(keys.SLOTS_LEAD_S * 1000)]))

    def limit(self, name: str) -> int | None:
        value = self.client.hget(keys.slots_limit(name), "limit")
        return int(value) if value is not None else None

    def publish(self, name: str, limit: int, reason: str, changed_at: float | None) -> None:
        """The limit and why; ``changed_at``: it changed then (a point of its path)."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(keys.slots_limit(name), mapping={"limit": limit, "reason": reason})
            pipe.expire(keys.slots_limit(name), keys.SLOTS_TTL_S)
            if changed_at is not None:
                pipe.rpush(keys.slots_path(name), json.dumps([changed_at, limit]))
                pipe.ltrim(keys.slots_path(name), -keys.SLOTS_PATH_KEPT, -1)
                pipe.expire(keys.slots_path(name), keys.SLOTS_TTL_S)
            pipe.execute()

    def paths(self) -> dict[str, list[tuple[float, int]]]:
        """Each adaptive (endpoint, model)'s limit over time: (when, limit) at each change."""
        return {
            name: [tuple(json.loads(point)) for point in self.client.lrange(key, 0, -1)]
            for name, key in self._named(":path")
        }


class LocalSlots:
    """The same in this process, for an embedded run."""

    def __init__(self) -> None:
        self._held: dict[str, dict[str, float]] = {}  # name -> holder -> its lease's end
        self._caps: dict[str, int] = {}
        self._limits: dict[str, tuple[int, str]] = {}
        self._paths: dict[str, list[tuple[float, int]]] = {}
        self._answers: dict[str, list[tuple[Sample, float]]] = {}
        self._lock = threading.Lock()

    def take(self, name: str, holder: str, cap: int, start: int = 1, ceiling: int = 0) -> tuple[int, int]:
        with self._lock:
            if cap == ADAPTIVE:
                cap = min(self._limits.get(name, (start, ""))[0], ceiling)
            now, held = time.monotonic(), self._held.setdefault(name, {})
            for gone in [h for h, end in held.items() if end <= now]:
                del held[gone]
            self._caps[name] = cap
            if holder in held or len(held) < cap:
                held[holder] = now + keys.SLOT_LEASE_S
                return len(held), cap
            return 0, cap

    def release(self, name: str, holder: str) -> None:
        with self._lock:
            self._held.get(name, {}).pop(holder, None)

    def in_use(self) -> dict[str, SlotsNow]:
        with self._lock:
            return {
                name: SlotsNow(len(held), self._caps[name], self._limits.get(name, (0, None))[1])
                for name, held in self._held.items()
            }

    def report(self, name: str, sample: Sample, ended_at: float) -> None:
        with self._lock:
            answers = self._answers.setdefault(name, [])
            answers.append((sample, ended_at))
            del answers[: -keys.SLOTS_ANSWERS_KEPT]

    def drain(self, name: str) -> list[tuple[Sample, float]]:
        with self._lock:
            return self._answers.pop(name, [])

    def lead(self, name: str, process: str) -> bool:
        return True  # one process

    def limit(self, name: str) -> int | None:
        with self._lock:
            return self._limits[name][0] if name in self._limits else None

    def publish(self, name: str, limit: int, reason: str, changed_at: float | None) -> None:
        with self._lock:
            self._limits[name] = (limit, reason)
            if changed_at is not None:
                path = self._paths.setdefault(name, [])
                path.append((changed_at, limit))
                del path[: -keys.SLOTS_PATH_KEPT]

    def paths(self) -> dict[str, list[tuple[float, int]]]:
        with self._lock:
            return {name: list(path) for name, path in self._paths.items()}


class FleetSlots:
    """This process's requests in flight: it waits for a slot under each (endpoint, model)'s
    limit, renews the leases it holds, reports how attempts ended, and steers an adaptive limit
    while it holds the lead."""

    def __init__(self, board: RedisSlots | LocalSlots, max_block_s: float):
        self.board, self.max_block_s = board, max_block_s
        self.process = uuid.uuid4().hex
        self.waited_s = 0.0  # time spent waiting for a slot, for the metrics
        self._leases: dict[tuple[str, str], tuple[int, int, int]] = {}  # (name, holder) -> take's cap, start, ceiling
        self._renewer: threading.Thread | None = None
        self._controllers: dict[str, AdaptiveLimit] = {}
        self._steered: dict[str, float] = {}  # name -> when this process last steered it
        self._steering = threading.Lock()

    def in_use(self) -> dict[str, SlotsNow]:
        return self.board.in_use()

    @contextmanager
    def slot(self, endpoint: str, model: str, limit: InFlight) -> Iterator[int]:
        """Hold one of the (endpoint, model)'s slots while the attempt runs, waiting up to
        ``max_block_s``; a longer wait raises RateLimited, so the job steps aside and comes back
        holding no worker thread. Yields the requests in flight with this one (0: no cap)."""
        if limit.cap == 0:
            yield 0
            return
        name, holder, started = keys.slot_name(endpoint, model), uuid.uuid4().hex, time.monotonic()
        take = (ADAPTIVE, limit.start, limit.ceiling) if limit.adaptive else (limit.cap or 0, 0, 0)
        while not (taken := self.board.take(name, holder, *take))[0]:
            if limit.adaptive:
                self.steer(name, limit)
            if time.monotonic() - started + SLOT_POLL_S > self.max_block_s:
                self.waited_s += time.monotonic() - started
                raise RateLimited(max(1.0, self.max_block_s), f"all {taken[1]} slot(s) of {endpoint} ({model}) in use")
            time.sleep(SLOT_POLL_S)
        in_flight = taken[0]
        self.waited_s += time.monotonic() - started
        self._renewing(name, holder, take)
        try:
            yield in_flight
        finally:
            self._leases.pop((name, holder), None)
            self.board.release(name, holder)

    def answered(self, endpoint: str, model: str, limit: InFlight, sample: Sample) -> None:
        name = keys.slot_name(endpoint, model)
        self.board.report(name, sample, time.time())
        self.steer(name, limit)

    def steer(self, name: str, limit: InFlight) -> None:
        """Once every PACE_S, where this process holds the lead: the reports in, a decision out."""
        now = time.time()
        with self._steering:
            if now - self._steered.get(name, 0.0) < PACE_S:
                return
            self._steered[name] = now
            if not self.board.lead(name, self.process):
                self._controllers.pop(name, None)  # another steers: what this one knew goes stale
                return
            controller = self._controllers.get(name)
            if controller is None:
                start = self.board.limit(name) or limit.start
                controller = self._controllers[name] = AdaptiveLimit(
                    start, limit.ceiling if limit.enforced else None, limit.ceiling, limit.timeout_s
                )
                self.board.publish(name, controller.limit, f"starting: {limit.source}", now)
            for sample, ended_at in self.board.drain(name):
                controller.record(sample, ended_at)
            waiting = queue_waiting(limit.queue_metric_url) if limit.queue_metric_url else None
            decision = controller.decide(now, waiting)
        self.board.publish(name, decision.limit, decision.reason, now if decision.changed else None)

    def _renewing(self, name: str, holder: str, take: tuple[int, int, int]) -> None:
        """Keep the lease while its request runs: one thread renews every held slot of this process."""
        self._leases[(name, holder)] = take
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew, name="prism-slot-leases", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        while True:
            time.sleep(keys.SLOT_LEASE_S / 3)
            for (name, holder), take in list(self._leases.items()):
                try:
                    self.board.take(name, holder, *take)
                except Exception:  # noqa: BLE001 - Redis away a moment: the next round tries again
                    continue


def slots_text(in_use: dict[str, SlotsNow]) -> str:
    """'LLM slots 1/1 (http://host:8080/v1 smollm2)' for a fixed cap, 'LLM 12 at a time
    (adapting: latency 1.10x its floor), 11 in flight (http://host:8000/v1 llama)' where it adapts:
    each (endpoint, model) lately in use."""
    fixed, adapting = [], []
    for name, now in sorted(in_use.items()):
        where = name.split(":", 1)[-1]
        if now.reason is None:
            fixed.append(f"{now.held}/{now.limit} ({where})")
        else:
            adapting.append(f"LLM {now.limit} at a time ({now.reason}), {now.held} in flight ({where})")
    return "; ".join(([f"LLM slots {', '.join(fixed)}"] if fixed else []) + adapting)
