"""A discrete-event model of a batching LLM server, driven by an in-flight limit (a fixed cap,
prism.llm.adaptive's controller, or one of prism.testing.limit_baselines), to tune and check the
controller in seconds without HTTP.

The server computes up to ``slots`` requests at once and queues the rest in arrival order. Each
running request progresses at ``1 / (1 + slowdown * (k - 1))`` of its solo speed while ``k`` run
together: a request that takes ``base`` seconds alone takes ``base * (1 + slowdown * (k - 1))``
in a steady batch of ``k`` (0.05: a full batch of 16 takes 1.75 times as long, and completes
16 / 1.75 = 9.1 times the work of one request alone). ``base`` follows the request's size: a
share for its prompt, the rest for its output, times a random factor that size does not explain.
A client that times out leaves; the server computes its answer anyway, holding its slot, as
llama.cpp does. Capacity can change mid-run (``capacity_at``: another tenant arrives), and the
server can refuse what is over its queue with 429 at once (``refuses_above``: TGI's
max_concurrent_requests) or report its queue (``reports_waiting``: vLLM's metric).

The client has endless work: it keeps as many requests in flight as the limit allows, and sends
a timed-out or refused request again.

    python -m prism.testing.adaptive_sim      # the standard scenarios' figures, for each controller
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from prism.llm.adaptive import AdaptiveLimit, Decision, Sample

# The standard scenarios: requests of 2 s alone, timeouts at 2.5 times the service time of a
# full batch of 16 (the tightest the targets allow), ten minutes each.
SERVICE_S = 2.0
SLOWDOWN = 0.05
BATCH_TIMEOUT_S = 2.5 * SERVICE_S * (1 + SLOWDOWN * 15)
FIXED_CAPS = (1, 2, 4, 8, 16, 32)
SETTLE_MARGIN = 2  # in flight over the new capacity that still counts as settled
SETTLE_HOLD_S = 20.0  # how long it must stay so


class Controller(Protocol):
    """What drives the client's limit: prism.llm.adaptive.AdaptiveLimit, or one to compare it with."""

    limit: int

    def record(self, sample: Sample, now: float) -> None: ...

    def decide(self, now: float, waiting: int | None = None) -> Decision: ...


@dataclass(frozen=True)
class Server:
    slots: int
    slowdown: float = SLOWDOWN
    capacity_at: tuple[tuple[float, int], ...] = ()  # (seconds from the start, slots from then)
    refuses_above: int | None = None  # more than this running and queued: 429 at once
    reports_waiting: bool = False


@dataclass(frozen=True)
class Load:
    service_s: float = SERVICE_S  # a request of the mean size, alone
    timeout_s: float = BATCH_TIMEOUT_S
    duration_s: float = 600.0
    prompt_tokens: int = 4000
    output_tokens: int = 100
    size_spread: float = 0.3  # each size uniform within this share of its mean
    jitter: float = 0.1  # sigma of a log-normal factor on the service time
    prompt_share: float = 0.3  # of a mean request's service time
    tick_s: float = 1.0  # how often the controller decides
    refused_after_s: float = 0.05  # how long a refusal takes to come back
    seed: int = 0


@dataclass(eq=False)
class _Request:
    sent_at: float
    prompt_tokens: int
    output_tokens: int
    work_s: float  # service time alone
    in_flight: int  # the client's, when sent, itself included
    left_s: float = 0.0
    abandoned: bool = False

    def __post_init__(self) -> None:
        self.left_s = self.work_s


@dataclass
class Result:
    duration_s: float
    tick_s: float
    useful_work_s: float = 0.0  # solo service seconds of answers a client read
    abandoned_work_s: float = 0.0  # of answers computed for a client that had left
    answered: int = 0
    timeouts: int = 0
    refused: int = 0
    trace: list[tuple[float, int, int]] = field(default_factory=list)  # (time, limit, in flight) per tick
    decisions: list[tuple[float, Decision]] = field(default_factory=list)  # those that changed the limit

    @property
    def throughput(self) -> float:
        """Useful work per second, in requests of the mean size alone."""
        return self.useful_work_s / self.duration_s

    @property
    def useful_share(self) -> float:
        total = self.useful_work_s + self.abandoned_work_s
        return self.useful_work_s / total if total else 1.0

    def settle_s(
        self, since: float, capacity: int, margin: int = SETTLE_MARGIN, hold_s: float = SETTLE_HOLD_S
    ) -> float:
        """Seconds from ``since`` until the requests in flight came within ``capacity + margin``
        and stayed there ``hold_s`` (inf: never)."""
        within_since: float | None = None
        for t, _, in_flight in self.trace:
            if t < since:
                continue
            if in_flight > capacity + margin:
                within_since = None
            elif within_since is None:
                within_since = t
            if within_since is not None and t - within_since >= hold_s:
                return within_since - since
        return math.inf

    def over_s(self, since: float, capacity: int, margin: int = SETTLE_MARGIN) -> float:
        """Seconds after ``since`` spent with more than ``capacity + margin`` in flight."""
        return sum(self.tick_s for t, _, in_flight in self.trace if t >= since and in_flight > capacity + margin)

    def mean_limit(self, since: float = 0.0, until: float = math.inf) -> float:
        limits = [limit for t, limit, _ in self.trace if since <= t < until]
        return sum(limits) / len(limits) if limits else 0.0


class _Run:
    def __init__(self, server: Server, load: Load, limit: Controller | int):
        self.server, self.load, self.limit = server, load, limit
        self.rng = random.Random(load.seed)
        self.now = 0.0
        self.capacity = server.slots
        self.changes = deque(sorted(server.capacity_at))
        self.queue: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.in_flight: set[_Request] = set()
        self.events: list[tuple[float, int, str, _Request]] = []  # the client's: timeouts and refusals
        self.order = itertools.count()
        self.next_tick = load.tick_s
        self.result = Result(load.duration_s, load.tick_s)

    def cap(self) -> int:
        return self.limit if isinstance(self.limit, int) else self.limit.limit

    def run(self) -> Result:
        while self.now < self.load.duration_s:
            self.fill()
            self.step()
        return self.result

    def fill(self) -> None:
        """Send while the limit allows; the server starts what its slots allow."""
        while len(self.in_flight) < self.cap():
            self.send()
        while self.queue and len(self.running) < self.capacity:
            self.running.append(self.queue.popleft())

    def send(self) -> None:
        load, rng = self.load, self.rng
        prompt = round(load.prompt_tokens * rng.uniform(1 - load.size_spread, 1 + load.size_spread))
        output = round(load.output_tokens * rng.uniform(1 - load.size_spread, 1 + load.size_spread))
        size = load.prompt_share * prompt / load.prompt_tokens + (1 - load.prompt_share) * output / load.output_tokens
        work = load.service_s * size * math.exp(rng.gauss(0.0, load.jitter))
        request = _Request(self.now, prompt, output, work, len(self.in_flight) + 1)
        self.in_flight.add(request)
        refuse = self.server.refuses_above
        if refuse is not None and len(self.running) + len(self.queue) >= refuse:
            heapq.heappush(self.events, (self.now + load.refused_after_s, next(self.order), "refused", request))
            return
        self.queue.append(request)
        heapq.heappush(self.events, (self.now + load.timeout_s, next(self.order), "timeout", request))

    def speed(self) -> float:
        return 1.0 / (1.0 + self.server.slowdown * (len(self.running) - 1)) if self.running else 0.0

    def step(self) -> None:
        """Advance to the next event and handle it."""
        speed = self.speed()
        done_at = self.now + min(r.left_s for r in self.running) / speed if self.running else math.inf
        client_at = self.events[0][0] if self.events else math.inf
        change_at = self.changes[0][0] if self.changes else math.inf
        at = min(done_at, client_at, change_at, self.next_tick, self.load.duration_s)
        for request in self.running:
            request.left_s -= (at - self.now) * speed
        self.now = at
        for request in [r for r in self.running if r.left_s <= 1e-9]:
            self.done(request)
        while self.events and self.events[0][0] <= self.now:
            _, _, kind, request = heapq.heappop(self.events)
            self.client_event(kind, request)
        while self.changes and self.changes[0][0] <= self.now:
            self.capacity = self.changes.popleft()[1]
        if self.now >= self.next_tick:
            self.next_tick += self.load.tick_s
            self.tick()

    def done(self, request: _Request) -> None:
        self.running.remove(request)
        if request.abandoned:
            self.result.abandoned_work_s += request.work_s
            return
        self.in_flight.discard(request)
        self.result.useful_work_s += request.work_s
        self.result.answered += 1
        self.record(request, self.now - request.sent_at, "ok")

    def client_event(self, kind: str, request: _Request) -> None:
        if request not in self.in_flight:
            return  # answered before its deadline
        self.in_flight.discard(request)
        if kind == "refused":
            self.result.refused += 1
            self.record(request, self.load.refused_after_s, "overloaded")
        else:
            request.abandoned = True
            self.result.timeouts += 1
            self.record(request, self.load.timeout_s, "timeout")

    def record(self, request: _Request, latency_s: float, outcome) -> None:
        if not isinstance(self.limit, int):
            sample = Sample(latency_s, request.prompt_tokens, request.output_tokens, outcome, request.in_flight)
            self.limit.record(sample, self.now)

    def tick(self) -> None:
        if not isinstance(self.limit, int):
            waiting = len(self.queue) if self.server.reports_waiting else None
            decision = self.limit.decide(self.now, waiting)
            if decision.changed:
                self.result.decisions.append((self.now, decision))
        self.result.trace.append((self.now, self.cap(), len(self.in_flight)))


def simulate(server: Server, load: Load, limit: Controller | int) -> Result:
    """One run of ``load`` against ``server`` under ``limit``: a fixed cap, or the controller."""
    return _Run(server, load, limit).run()


@dataclass(frozen=True)
class Figures:
    """What the targets are judged on."""

    throughput_ratio: float  # the controller's useful work over the best fixed cap's
    best_cap: int
    batching_timeouts: int
    batching_mean_limit: float
    one_slot_timeouts: int
    one_slot_useful_share: float
    one_slot_throughput_ratio: float  # over a cap of 1
    halved_timeouts: int
    halved_settle_s: float  # until in flight came within the new capacity + SETTLE_MARGIN, and stayed
    halved_over_s: float  # seconds over it after that: probes for more capacity
    halved_mean_in_flight: float  # from the change to the end


def adaptive(timeout_s: float) -> Controller:
    return AdaptiveLimit(timeout_s=timeout_s)


def figures(seed: int = 0, make: Callable[[float], Controller] = adaptive) -> Figures:
    """The standard scenarios: a 16-slot batching server that reports nothing; a one-slot
    server (timeout 2.5 times its service time); 16 slots that become 8 half-way. ``make``: the
    controller for a request timeout (the client knows its own)."""
    batching, load = Server(16), Load(seed=seed)
    caps = {cap: simulate(batching, load, cap).throughput for cap in FIXED_CAPS}
    best = max(caps, key=lambda cap: caps[cap])
    run = simulate(batching, load, make(load.timeout_s))
    one_slot, one_load = Server(1, slowdown=0.0), Load(timeout_s=2.5 * SERVICE_S, seed=seed)
    alone = simulate(one_slot, one_load, make(one_load.timeout_s))
    at = load.duration_s / 2
    halved = simulate(Server(16, capacity_at=((at, 8),)), load, make(load.timeout_s))
    settle_s = halved.settle_s(at, 8)
    after = [in_flight for t, _, in_flight in halved.trace if t >= at]
    return Figures(
        throughput_ratio=run.throughput / caps[best],
        best_cap=best,
        batching_timeouts=run.timeouts,
        batching_mean_limit=run.mean_limit(),
        one_slot_timeouts=alone.timeouts,
        one_slot_useful_share=alone.useful_share,
        one_slot_throughput_ratio=alone.throughput / simulate(one_slot, one_load, 1).throughput,
        halved_timeouts=halved.timeouts,
        halved_settle_s=settle_s,
        halved_over_s=halved.over_s(at + settle_s, 8) if settle_s < math.inf else math.inf,
        halved_mean_in_flight=sum(after) / len(after),
    )


def summary(seeds: range, make: Callable[[float], Controller] = adaptive) -> str:
    """One line of the figures over ``seeds``: the worst of each, and the mean where it tells more."""
    runs = [figures(seed, make) for seed in seeds]

    def worst(name: str, pick: Callable = min) -> float:
        return pick(getattr(f, name) for f in runs)

    def mean(name: str) -> float:
        return sum(getattr(f, name) for f in runs) / len(runs)

    return (
        f"16 slots: throughput {worst('throughput_ratio'):.2f} (mean {mean('throughput_ratio'):.2f}) of the best "
        f"fixed cap, {worst('batching_timeouts', max):.0f} timeouts, limit {mean('batching_mean_limit'):.1f}; "
        f"1 slot: {worst('one_slot_timeouts', max):.0f} timeouts, useful {worst('one_slot_useful_share'):.3f}; "
        f"16 -> 8: {worst('halved_timeouts', max):.0f} timeouts, settled in {worst('halved_settle_s', max):.0f} s "
        f"(mean {mean('halved_settle_s'):.0f}), in flight {mean('halved_mean_in_flight'):.1f} after"
    )


def main() -> None:
    from prism.testing.limit_baselines import AimdLimit, Gradient2Limit, VegasLimit

    seeds = range(10)
    print(
        f"each the worst of {len(seeds)} seeds: ten minutes, requests of {SERVICE_S:g} s alone, timeouts {BATCH_TIMEOUT_S:g} s"
    )
    controllers: dict[str, Callable[[float], Controller]] = {
        "adaptive": adaptive,
        "vegas": lambda _: VegasLimit(),
        "gradient2": lambda _: Gradient2Limit(),
        "aimd": lambda _: AimdLimit(),
    }
    for name, make in controllers.items():
        print(f"{name:10s} {summary(seeds, make)}")


if __name__ == "__main__":
    main()
