"""The usual adaptive concurrency limits, written as Netflix's concurrency-limits library has them,
to compare prism.llm.adaptive's controller with on the simulated servers of
prism.testing.adaptive_sim. Each decides once per tick from the answers of that tick; latency is
an answer's as if it were of the reference size (prism.llm.adaptive.LatencyFloor), so that the
comparison is about the rule, not the size noise.

- ``VegasLimit``: the queue estimate ``limit * (1 - floor / latency)``; grow while it is under
  ``alpha`` (3 log10 limit), shrink over ``beta`` (6 log10 limit).
- ``Gradient2Limit``: the ratio of a long-term (about 100 ticks, some 500 answers: the library
  averages 600) to a short-term latency average, within a tolerance of 1.5
  (``limit * gradient + sqrt(limit)``, smoothed); the long average drifts down when it is far
  above the short one.
- ``AimdLimit``: one more per tick while latency stays under ``threshold`` times its floor,
  ``backoff`` of the limit otherwise or on a timeout or overload.
"""

from __future__ import annotations

import math

from prism.llm.adaptive import Decision, LatencyFloor, Sample


class _Base:
    def __init__(self, start: int = 1, ceiling: int = 64):
        self.limit = start
        self.estimate = float(start)  # the limit before it is made a whole number, as the library keeps it
        self.ceiling = ceiling
        self.floor = LatencyFloor(creep_per_s=0.0)
        self._latencies: list[float] = []
        self._dropped = False

    def record(self, sample: Sample, now: float) -> None:
        if sample.outcome != "ok":
            self._dropped = True
            return
        self.floor.learn(sample.latency_s, sample.prompt_tokens, sample.output_tokens)
        self._latencies.append(self.floor.as_reference(sample.latency_s, sample.prompt_tokens, sample.output_tokens))

    def decide(self, now: float, waiting: int | None = None) -> Decision:
        latencies, dropped = self._latencies, self._dropped
        self._latencies, self._dropped = [], False
        previous = self.limit
        if latencies or dropped:
            mean = sum(latencies) / len(latencies) if latencies else None
            if mean is not None:
                self.floor.lower(mean, now)
            self.estimate = max(1.0, min(float(self.ceiling), self.update(mean, dropped)))
            self.limit = int(self.estimate)
        return Decision(self.limit, "", previous)

    def update(self, latency_s: float | None, dropped: bool) -> float:
        raise NotImplementedError


class VegasLimit(_Base):
    def update(self, latency_s: float | None, dropped: bool) -> float:
        step = math.log10(max(self.limit, 2))
        if dropped or latency_s is None:
            return self.estimate - step
        queue = self.limit * (1 - (self.floor.of(0.0) or latency_s) / latency_s)
        if queue <= step:
            return self.estimate + 6 * step
        if queue < 3 * step:
            return self.estimate + step
        if queue > 6 * step:
            return self.estimate - step
        return self.estimate


class Gradient2Limit(_Base):
    def __init__(self, start: int = 1, ceiling: int = 64, tolerance: float = 1.5, smoothing: float = 0.2):
        super().__init__(start, ceiling)
        self.tolerance, self.smoothing = tolerance, smoothing
        self._long: float | None = None

    def update(self, latency_s: float | None, dropped: bool) -> float:
        if latency_s is None:
            return self.estimate
        self._long = latency_s if self._long is None else self._long + (latency_s - self._long) * 2 / 101
        if self._long / latency_s > 2:
            self._long *= 0.95  # drifted far above the short-term latency: let it come down
        gradient = max(0.5, min(1.0, self.tolerance * self._long / latency_s))
        target = self.estimate * gradient + math.sqrt(self.estimate)
        return self.estimate * (1 - self.smoothing) + target * self.smoothing


class AimdLimit(_Base):
    def __init__(self, start: int = 1, ceiling: int = 64, threshold: float = 2.0, backoff: float = 0.9):
        super().__init__(start, ceiling)
        self.threshold, self.backoff = threshold, backoff

    def update(self, latency_s: float | None, dropped: bool) -> float:
        floor = self.floor.of(0.0)
        if dropped or (latency_s is not None and floor and latency_s > self.threshold * floor):
            return self.estimate * self.backoff
        return self.estimate + 1 if latency_s is not None else self.estimate
