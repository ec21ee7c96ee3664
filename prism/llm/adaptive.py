"""An adaptive in-flight limit for a self-hosted LLM server that does not say how many requests it
computes at once (vLLM, TGI, Ollama, LiteLLM): found from its answers alone, and followed.

The method is a hill climb on the server's throughput, read through Little's law. While the
client keeps ``c`` requests in flight, the server completes ``c / latency`` of them a second. A
batching server computes more requests at once at some cost to each: latency rises more slowly
than ``c``, so throughput rises. Past its batch capacity the extra requests only queue: latency
rises as ``c`` does, and throughput stays flat. The *elasticity* between two limits,
``ln(latency ratio) / ln(in-flight ratio)``, tells them apart: near 0 for free concurrency, 1 for
a queue. The controller measures the latency at one limit for an *epoch* (enough answers sent
under it), compares it with the nearest limit measured lately below, and

- grows while the elasticity is under ``grow_below`` (throughput still rises by at least 40% of
  the step): doubling until the first sign of a queue, as TCP's slow start does, then by a
  quarter;
- steps back, halving the interval to the limit below, from ``queueing_from`` (the extra
  requests mostly queued), and remembers that knee a while;
- holds in between: the knee, full throughput with little queue.

Why not a latency threshold (TCP Vegas, Netflix's Gradient2, AIMD on latency): a batching server
slows every request as its batch fills (each decode step of vLLM grows with the batch), so
latency above its floor is not yet a queue, and a threshold right for one server's batch is
wrong for another's. On the simulated servers (``python -m prism.testing.adaptive_sim``;
``prism.testing.limit_baselines``), ten minutes each: against 16 slots whose full batch takes
1.75 times as long as one request, Vegas settles near 13 (0.81 of the best fixed cap's
throughput at worst); AIMD that backs off at twice the floor does well there (0.93), since 1.75
is under 2, but reaches 0.72 to 0.81 where the batch slows faster or holds 32, and sits at two
requests with timeouts on a one-slot server; Gradient2 grows until requests time out. This
controller: 0.91 at worst there (0.90 over 40 seeds), 0.84 and 0.86 on the other two. The
elasticity needs no threshold on latency: it compares the server with itself at two loads.

Latency is compared as a multiple of its floor. Requests differ in size, so each latency is
first brought to that of a reference-sized request by a fitted cost (``LatencyFloor``); the
floor is the lowest epoch mean of such latencies. Since limits are compared with each other, the
floor needs to be stable more than exact; it forgets slowly (``floor_creep_per_s``).

An epoch lasts until its mean is known well enough for the comparison it serves (the larger the
step and the steadier the server, the fewer answers). Faster signals shrink at once: a timeout
(``timeout_decrease``), a 429 or 503 "overloaded" (``overload_decrease``), requests the server
reports waiting (vLLM's ``vllm:num_requests_waiting``), and answers slower than their load can
explain (the server lost capacity: another tenant, a smaller batch), after which short epochs
follow the limit down. Each counts only answers sent under the current limit, so one overload
shrinks the limit once, not once per request it caught. With the request timeout known, no step
up is taken that, were it all queue, would carry the slowest recent answers near it.

Pure: no I/O and no clock. The caller records each answer (``record``) and asks for a decision
at its own pace (``decide``, about every second), passing the time.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["ok", "timeout", "overloaded"]
UPPER_BOUND = 64  # the most in flight when a server states no enforced slots


@dataclass(frozen=True)
class Sample:
    """One answer (or its absence): how long it took (a timeout: how long the client waited), its
    size, and how it ended ("overloaded": a 429 or a 503 "overloaded"). ``in_flight``: the
    requests in flight when it was sent, itself included; None: the limit then."""

    latency_s: float
    prompt_tokens: int
    output_tokens: int
    outcome: Outcome = "ok"
    in_flight: int | None = None


@dataclass(frozen=True)
class Decision:
    limit: int
    reason: str
    previous: int

    @property
    def changed(self) -> bool:
        return self.limit != self.previous


@dataclass(frozen=True)
class Tuning:
    """The controller's constants; the defaults are the ones the simulation was tuned with."""

    grow_factor: float = 1.25  # a step up: the limit times this, at least one more
    min_step: float = 1.1  # a smaller step is lost in the noise of an epoch's mean
    compare_step: float = 1.2  # limits compared are at least this far apart, where measured
    slow_start_below: float = 0.3  # until the first queue, double while the elasticity is under this
    # Elasticity: under grow_below a step up gained throughput (power, throughput over latency,
    # still rises); from queueing_from the extra requests mostly queued (1 is a pure queue).
    grow_below: float = 0.6
    queueing_from: float = 0.8
    near_floor: float = 1.25  # latency this near its floor is no queue, whatever was measured below
    jump: float = 1.3  # latency this much above what its load explains (were the excess a queue): capacity lost
    timeout_decrease: float = 0.7
    overload_decrease: float = 0.75
    # An epoch lasts until its mean latency is known well enough that the elasticity against the
    # limit below is known to about this much: the fewer answers, the larger that step and the
    # steadier the latency; within these bounds.
    elasticity_error: float = 0.14
    min_answers: int = 4
    max_answers: int = 200
    max_epoch_s: float = 120.0  # a slow server's epoch ends here with at least min_answers
    memory_s: float = 120.0  # how long a limit's measured latency stays comparable,
    memory_epochs: int = 6  # or this many epochs of the last one's length, if longer
    knee_hold_s: float = 30.0  # after stepping back from a knee, how long before probing it again
    knee_hold_max_s: float = 240.0  # the hold doubles each time the same knee is confirmed
    in_use_share: float = 0.8  # fewer in flight than this share of the limit: demand, not the server, limits
    timeout_headroom: float = 0.8  # a step up may bring the slowest answers to this share of the timeout
    slowest_of: int = 32  # the latest answers whose slowest stands for "the slowest answers"
    floor_creep_per_s: float = 0.0001  # the floor forgets: about x1.4 an hour with nothing lower


@dataclass
class _Answer:
    sent_at: float
    latency_s: float
    prompt_tokens: int
    output_tokens: int
    in_flight: int
    outcome: Outcome = "ok"


@dataclass
class _Measured:
    ratio: float
    at: float
    rough: bool = False  # from a short epoch while recovering: forgotten once recovered


class LatencyFloor:
    """The latency of a request of the reference size (the first answer's), alone; and any
    answer's latency as if it had been of that size.

    Size: latency ~ a + b * prompt + c * output, fitted by least squares over the answers (older
    ones weigh less), since a server spends on a prompt token far less than on an output token
    (one pass over the prompt, one pass per output token) by a factor that differs between
    servers. Where sizes do not vary, the fit stays at "size does not matter" (a ridge term).

    The floor: the lowest mean an epoch had of such latencies, forgotten slowly. A mean, not the
    least single answer: that one keeps falling as answers come in, and would make a later
    limit look slower than an earlier one."""

    def __init__(self, creep_per_s: float, forget: float = 0.999, ridge: float = 1e-3):
        self.creep_per_s, self.forget, self.ridge = creep_per_s, forget, ridge
        self._reference: tuple[float, float] | None = None  # prompt and output tokens
        self._xx = [[0.0] * 3 for _ in range(3)]  # the fit's normal equations, weighted
        self._xy = [0.0] * 3
        self._fit = (1.0, 0.0, 0.0)  # a, b, c over the features below
        self._floor: tuple[float, float] | None = None  # (seconds, since when)

    def _features(self, prompt_tokens: int, output_tokens: int) -> tuple[float, float, float]:
        if self._reference is None:
            self._reference = (max(1, prompt_tokens), max(1, output_tokens))
        return 1.0, prompt_tokens / self._reference[0], output_tokens / self._reference[1]

    def learn(self, latency_s: float, prompt_tokens: int, output_tokens: int) -> None:
        x = self._features(prompt_tokens, output_tokens)
        for i in range(3):
            self._xy[i] = self._xy[i] * self.forget + x[i] * latency_s
            for j in range(3):
                self._xx[i][j] = self._xx[i][j] * self.forget + x[i] * x[j]
        weight = self._xx[0][0]
        system = [row[:] + [self._xy[i]] for i, row in enumerate(self._xx)]
        for i in (1, 2):  # "size does not matter" unless the answers say otherwise
            system[i][i] += self.ridge * weight
        self._fit = _solve(system) or self._fit

    def as_reference(self, latency_s: float, prompt_tokens: int, output_tokens: int) -> float:
        """This latency as if the request had been of the reference size."""
        x = self._features(prompt_tokens, output_tokens)
        reference = sum(self._fit)
        expected = sum(b * xi for b, xi in zip(self._fit, x))
        return latency_s * reference / max(expected, 0.05 * reference) if reference > 0 else latency_s

    def of(self, now: float) -> float | None:
        if self._floor is None:
            return None
        floor, since = self._floor
        return floor * math.exp(self.creep_per_s * max(0.0, now - since))

    def lower(self, mean_s: float, now: float) -> None:
        """An epoch's mean latency (of the reference size): the floor, where it is lower."""
        current = self.of(now)
        self._floor = (mean_s if current is None or mean_s < current else current, now)


def _solve(system: list[list[float]]) -> tuple[float, float, float] | None:
    """Three linear equations (rows of coefficients and the right side); None if singular."""
    rows = [row[:] for row in system]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) < 1e-12:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(3):
            if r != col:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return rows[0][3] / rows[0][0], rows[1][3] / rows[1][1], rows[2][3] / rows[2][2]


class Latencies:
    """What single answers took lately: a smoothed usual latency, the latest few (the slowest
    of which guards the timeout), and their spread, standard deviation over mean."""

    def __init__(self, tuning: Tuning):
        self.tuning = tuning
        self.usual_s = 0.0
        self.latest_s: deque[float] = deque(maxlen=tuning.slowest_of)
        self.spread = 0.2

    def add(self, latency_s: float) -> None:
        self.latest_s.append(latency_s)
        self.usual_s = 0.9 * self.usual_s + 0.1 * latency_s if self.usual_s else latency_s

    def spread_of(self, seen: list[float], mean_s: float) -> None:
        """An epoch's answers (of the reference size): how much they varied, averaged in."""
        if len(seen) > 2:
            spread = math.sqrt(sum((x - mean_s) ** 2 for x in seen) / (len(seen) - 1)) / mean_s
            self.spread = (self.spread + spread) / 2

    def to_see_a_jump(self) -> int:
        """Enough answers that their mean rising by ``jump`` is three standard errors."""
        return max(2 * self.tuning.min_answers, math.ceil((3 * self.spread / math.log(self.tuning.jump)) ** 2))


class Knee:
    """Where requests began to queue: no step up to it for a while, longer each time the same
    knee is found again (within a step of it)."""

    def __init__(self, tuning: Tuning):
        self.tuning = tuning
        self.at: int | None = None  # a limit that queued
        self.until = 0.0  # when it may be probed again
        self.last: int | None = None  # the last knee found, held or not
        self.hold_s = tuning.knee_hold_s

    def found(self, now: float, limit: int) -> None:
        again = self.last and abs(math.log(limit / self.last)) <= math.log(self.tuning.grow_factor) + 1e-9
        self.hold_s = min(self.tuning.knee_hold_max_s, 2 * self.hold_s) if again else self.tuning.knee_hold_s
        self.at, self.until, self.last = limit, now + self.hold_s, limit

    def forget(self) -> None:
        self.at = self.last = None
        self.hold_s = self.tuning.knee_hold_s


def epoch_figures(floor: LatencyFloor, answers: Sequence[_Answer], now: float) -> tuple[int, float, float]:
    """Answers' requests in flight, mean latency (of the reference size) and that over the floor."""
    in_flight = max(1, round(sum(a.in_flight for a in answers) / len(answers)))
    mean_s = sum(floor.as_reference(a.latency_s, a.prompt_tokens, a.output_tokens) for a in answers) / len(answers)
    return in_flight, mean_s, mean_s / (floor.of(now) or mean_s)


def step_down(tuning: Tuning, in_flight: int, ratio: float, unqueued_ratio: float | None) -> float:
    """One step down; while recovering from a loss of capacity (``unqueued_ratio``: the latency
    ratio it had before), as far as Little's law says that latency would come back (were the
    excess all queue)."""
    step = in_flight / tuning.grow_factor
    if unqueued_ratio is None:
        return step
    return max(in_flight / 2, min(step, in_flight * unqueued_ratio / ratio))


class AdaptiveLimit:
    """The in-flight limit of one (endpoint, model). ``start``: what the server reports, else 1;
    ``enforced_slots``: what it enforces (llama.cpp's total_slots, TGI's max_concurrent_requests),
    the ceiling; else ``upper_bound``. ``timeout_s``: the client's request timeout, where known:
    no step up that could carry the slowest answers near it."""

    def __init__(
        self,
        start: int | None = None,
        enforced_slots: int | None = None,
        upper_bound: int = UPPER_BOUND,
        timeout_s: float | None = None,
        tuning: Tuning | None = None,
    ):
        self.tuning = tuning or Tuning()
        self.timeout_s = timeout_s
        self.ceiling = max(1, enforced_slots or upper_bound)
        said = "the server's {} slots" if enforced_slots else "its upper bound of {}"
        self.ceiling_said = said.format(self.ceiling)
        self.limit = min(self.ceiling, max(1, start or 1))
        self.floor = LatencyFloor(self.tuning.floor_creep_per_s)
        self._changed_at = -math.inf  # when the limit last changed: answers sent before it are stale
        self._settle_s = 0.0  # after a change, answers sent this soon are not yet at the new limit
        self._epoch_from: float | None = None  # when the epoch began; None: before the first answer
        self._epoch: list[_Answer] = []  # ok answers sent under the current limit
        self._alarms: list[_Answer] = []  # timeouts and overloads since the last decision
        self._recent: deque[_Answer] = deque(maxlen=256)  # ok answers sent under the current limit
        self._measured: dict[int, _Measured] = {}  # in flight -> latency ratio measured there
        self._knee = Knee(self.tuning)
        self._recovering = False  # the server lost capacity: short epochs while the limit falls
        self._unqueued_ratio = 1.0  # while recovering: the latency it had before, at about that load
        self._slow_start = True  # doubling, until a step is not free or the limit shrinks
        self.latencies = Latencies(self.tuning)
        self._memory_s = self.tuning.memory_s

    def record(self, sample: Sample, now: float) -> None:
        """One answer, ended at ``now`` (a timeout: when the client gave up)."""
        sent_at = now - sample.latency_s
        if self._epoch_from is None:
            self._epoch_from = sent_at
        if sample.outcome == "ok":
            self.floor.learn(sample.latency_s, sample.prompt_tokens, sample.output_tokens)
        if sent_at < self._changed_at:
            return  # sent under another limit: it says nothing about this one
        answer = _Answer(
            sent_at,
            sample.latency_s,
            sample.prompt_tokens,
            sample.output_tokens,
            sample.in_flight or self.limit,
            sample.outcome,
        )
        if sample.outcome != "ok":
            self._alarms.append(answer)
            return
        self.latencies.add(sample.latency_s)
        self._recent.append(answer)
        if sent_at >= self._changed_at + self._settle_s:
            self._epoch.append(answer)

    def decide(self, now: float, waiting: int | None = None) -> Decision:
        """The limit from now on, and why. ``waiting``: the requests the server reports queued
        (vLLM's ``vllm:num_requests_waiting``); None where it reports none."""
        alarms, self._alarms = self._alarms, []
        if any(a.outcome == "overloaded" for a in alarms):
            return self._set(
                now, self.limit * self.tuning.overload_decrease, "shrank: the server is overloaded (429/503)"
            )
        if timeouts := sum(a.outcome == "timeout" for a in alarms):
            what = "a timeout" if timeouts == 1 else f"{timeouts} timeouts"
            return self._set(now, self.limit * self.tuning.timeout_decrease, f"shrank: {what}")
        if waiting and now - self._changed_at >= self.latencies.usual_s:
            # One step per latency: what the last step did shows only once its answers are back.
            step = max(1, min(waiting, self.limit // 4))
            return self._set(now, self.limit - step, f"shrank: the server reports {waiting} waiting")
        if len(self._recent) >= self.latencies.to_see_a_jump() and (lost := self._capacity_lost(now)):
            return lost
        needed = self._answers_needed()
        started = self._epoch_from if self._epoch_from is not None else now
        if len(self._epoch) < needed and not (
            now - started >= self.tuning.max_epoch_s and len(self._epoch) >= self.tuning.min_answers
        ):
            return self._hold(f"holding: measuring {self.limit} in flight ({len(self._epoch)} of {needed} answers)")
        return self._conclude(now, waiting)

    def _answers_needed(self) -> int:
        if self._recovering:
            return self.tuning.min_answers  # the server changed: a rough measure soon beats a fine one late
        lower = [c for c in self._measured if c < self.limit]
        step = self.limit / max(lower) if lower else (2.0 if self._slow_start else self.tuning.grow_factor)
        step = max(step, self.tuning.compare_step)  # a finer step is not worth an endless epoch
        error = self.tuning.elasticity_error * math.log(step) / math.sqrt(2)  # of each of two means
        return max(
            self.tuning.min_answers, min(self.tuning.max_answers, math.ceil((self.latencies.spread / error) ** 2))
        )

    def _capacity_lost(self, now: float) -> Decision | None:
        """The latest answers slower than this load can explain: the server lost capacity
        (another tenant, a smaller batch). At most, latency rises as the requests in flight do
        (a pure queue); by Little's law the server now serves ``expected / now`` of them."""
        # Every answer sent under this limit, those of the settling time after a step up too:
        # they can only be faster than the step's steady state.
        in_flight, _, ratio = epoch_figures(self.floor, list(self._recent)[-self.latencies.to_see_a_jump() :], now)
        fresh = [c for c, m in self._measured.items() if now - m.at <= self._memory_s]
        if not fresh:
            return None
        at = min(fresh, key=lambda c: abs(math.log(c / in_flight)))
        before = self._measured[at].ratio
        expected = before * max(1.0, in_flight / at)
        if ratio <= expected * self.tuning.jump:
            return None
        self._forget()
        self._recovering, self._unqueued_ratio = True, before
        said = f"shrank: latency {ratio / expected:.1f}x what it was at {at} in flight"
        return self._set(now, in_flight * expected / ratio, said)

    def _conclude(self, now: float, waiting: int | None) -> Decision:
        """An epoch's answers are in: keep what it measured, and move by it."""
        in_flight, mean_s, ratio = epoch_figures(self.floor, self._epoch, now)
        self.floor.lower(mean_s, now)
        seen = [self.floor.as_reference(a.latency_s, a.prompt_tokens, a.output_tokens) for a in self._epoch]
        self.latencies.spread_of(seen, mean_s)  # how much single answers vary: the epochs' length follows it
        self._memory_s = max(self.tuning.memory_s, self.tuning.memory_epochs * (now - (self._epoch_from or now)))
        self._epoch, self._epoch_from = [], now
        for stale in [c for c, m in self._measured.items() if now - m.at > self._memory_s]:
            del self._measured[stale]
        before = self._measured.get(in_flight)
        if before and ratio < before.ratio / self.tuning.jump:
            self._forget()  # faster at the same load: it gained capacity, what was measured is stale
            self._slow_start, before = True, None
        # A limit measured again: the mean of the two, so that repeated visits sharpen it.
        merged = ratio if before is None else (before.ratio + ratio) / 2
        self._measured[in_flight] = _Measured(merged, now, rough=self._recovering)
        if in_flight < self.tuning.in_use_share * self.limit:
            return self._hold(f"holding: {in_flight} of {self.limit} in use")
        decision = self._climb(now, in_flight, ratio, waiting)
        if self._recovering and decision.limit >= decision.previous:
            self._recovered()
        return decision

    def _climb(self, now: float, in_flight: int, ratio: float, waiting: int | None) -> Decision:
        """Grow, hold, or step back toward the knee, by the elasticity against the nearest limit
        measured below (else above); with neither, by the latency's distance from its floor."""
        # Compared with a limit at least a measurable step away where there is one: one request
        # more or less is lost in the noise of an epoch's mean.
        lower = [c for c in self._measured if c < in_flight]
        below = max((c for c in lower if in_flight / c >= self.tuning.compare_step), default=max(lower, default=None))
        higher = [c for c in self._measured if c > in_flight]
        above = min((c for c in higher if c / in_flight >= self.tuning.compare_step), default=min(higher, default=None))
        floor_said = f"latency {ratio:.2f}x its floor"
        if below is None and above is None:
            if ratio <= self.tuning.near_floor or in_flight == 1:
                return self._grow(now, floor_said, waiting, doubling=self._slow_start)
            return self._set(
                now,
                step_down(self.tuning, in_flight, ratio, self._unqueued_ratio if self._recovering else None),
                f"shrank: {floor_said}, to measure below",
            )
        low, high = (below, in_flight) if below is not None else (in_flight, above or in_flight)
        rise = self._measured[high].ratio / self._measured[low].ratio
        elasticity = math.log(max(rise, 1e-9)) / math.log(high / low)
        rose = f"latency rose {rise:.2f}x for {high / low:.2f}x in flight"
        if elasticity < self.tuning.grow_below and self._knee.at and high >= self._knee.at:
            self._knee.at = None  # the knee, probed again, no longer queues
        if elasticity < self.tuning.grow_below:
            doubling = self._slow_start and below is not None and elasticity <= self.tuning.slow_start_below
            return self._grow(now, f"{floor_said}, throughput still rising", waiting, doubling)
        if below is None:
            # A queue (or the start of one) above, and nothing measured below: step down to
            # learn; while recovering from a loss of capacity, on any sign of one.
            if elasticity >= self.tuning.queueing_from or self._recovering:
                self._knee.found(now, high)
                if self.limit == 1:
                    return self._hold(f"holding: queueing began at {high}")
                return self._set(
                    now,
                    step_down(self.tuning, in_flight, ratio, self._unqueued_ratio if self._recovering else None),
                    f"shrank: {rose} above, to measure below",
                )
            return self._hold(f"holding: at the knee, {floor_said}")
        if elasticity >= self.tuning.queueing_from:
            self._knee.found(now, high)  # the extra requests mostly queued
        elif high / low <= self.tuning.grow_factor * 1.05:
            return self._hold(f"holding: at the knee, {floor_said}")
        # The knee lies between low and high: halve the interval (geometrically) while a step
        # stays measurable.
        middle = round(math.sqrt(low * high))
        target = middle if middle > low and min(middle / low, high / middle) >= self.tuning.min_step else low
        return self._set(now, target, f"shrank: queueing, {rose}")

    def _grow(self, now: float, why: str, waiting: int | None, doubling: bool = False) -> Decision:
        if self._recovering:
            # The short epochs that follow a loss of capacity serve to step down; a step up
            # waits for full ones.
            self._recovered()
            return self._hold(f"holding: {why}, measuring again")
        if waiting:
            return self._hold(f"holding: the server reports {waiting} waiting")
        if self.limit >= self.ceiling:
            return self._hold(f"holding: at {self.ceiling_said}")
        # Doubling until the first sign of a queue (as TCP's slow start), then smaller steps.
        self._slow_start = doubling
        target = min(
            self.ceiling, max(self.limit + 1, math.ceil(self.limit * (2.0 if doubling else self.tuning.grow_factor)))
        )
        if self._knee.at and now >= self._knee.until:
            self._knee.at = None  # its hold is over: look again, first at the knee itself
        if self._knee.last and self.limit < self._knee.last:
            target = min(target, self._knee.last)
        if self._knee.at and target >= self._knee.at:
            # Below a knee found lately: only a step large enough to measure, short of it.
            target = self._knee.at - 1
            if target < max(self.limit + 1, self.limit * self.tuning.min_step):
                return self._hold(f"holding: queueing began at {self._knee.at}")
        if self.timeout_s and self.latencies.latest_s:
            # Were the step all queue, the slowest answers would take target / limit as long.
            safe = math.floor(self.limit * self.tuning.timeout_headroom * self.timeout_s / max(self.latencies.latest_s))
            if safe <= self.limit:
                return self._hold(f"holding: one more could reach the {self.timeout_s:g} s timeout")
            target = min(target, safe)
        return self._set(now, target, f"adapting: {why}")

    def _recovered(self) -> None:
        """Out of the short epochs: what they measured, hurried and in the server's change, goes."""
        self._recovering = False
        self._measured = {c: m for c, m in self._measured.items() if not m.rough}

    def _forget(self) -> None:
        self._measured.clear()
        self._knee.forget()

    def _hold(self, reason: str) -> Decision:
        return Decision(self.limit, reason, self.limit)

    def _set(self, now: float, target: float, reason: str) -> Decision:
        previous = self.limit
        self.limit = min(self.ceiling, max(1, math.floor(target)))
        if self.limit == previous:
            return self._hold(f"holding: {reason.split(': ', 1)[-1]}, at {self.limit}")
        self._changed_at = self._epoch_from = now
        self._recent.clear()
        # A step up: the first requests sent after it meet the shorter queue of the old limit,
        # and would make it look cheaper than it is. A step down: nothing is sent until the
        # requests in flight have fallen to the new limit, so the first ones meet its queue.
        self._settle_s = max([self.latencies.usual_s, *self.latencies.latest_s]) if self.limit > previous else 0.0
        self._epoch = []
        self._slow_start = self._slow_start and self.limit > previous
        return Decision(self.limit, reason, previous)
