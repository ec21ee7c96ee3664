"""A batching server's compute, in real time, for the provider simulator's request threads: up to
``slots`` requests computed at once, each slower as more run together, the rest queued in
arrival order (as vLLM and TGI schedule them).

While ``k`` requests run, each progresses at ``1 / (1 + slowdown * (k - 1))`` of its speed
alone: a request that takes ``work`` seconds alone takes ``work * (1 + slowdown * (k - 1))`` in
a steady batch of ``k``. A request whose client has left is computed to its end all the same,
holding its place in the batch. ``capacity_at`` changes the slots mid-run, counted from this
object's creation: ``((30.0, 8),)`` computes at most 8 at once from 30 s on (another tenant
arrived); requests already running go on.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

SLOWDOWN = 0.05  # per request running beside it: a batch of 16 takes 1.75 times as long


@dataclass(eq=False)
class _Job:
    left_s: float  # of work, at the speed of a request alone
    started: float | None = None
    done: float | None = None


class BatchingCompute:
    def __init__(
        self,
        slots: int,
        slowdown: float = SLOWDOWN,
        capacity_at: tuple[tuple[float, int], ...] = (),
        clock=time.monotonic,
    ):
        self.slots, self.slowdown, self.clock = slots, slowdown, clock
        self.capacity_at = tuple(sorted(capacity_at))
        self.began = clock()
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._running: list[_Job] = []
        self._advanced_to = self.began

    def capacity(self, now: float) -> int:
        """The requests it computes at once at ``now``."""
        slots = self.slots
        for at, changed in self.capacity_at:
            if now - self.began >= at:
                slots = changed
        return max(1, slots)

    def counts(self) -> tuple[int, int]:
        """(running, waiting) now."""
        with self._cond:
            self._step(self.clock())
            return len(self._running), len(self._queue)

    def compute(self, work_s: float) -> float:
        """Queue for a place in the batch, then compute ``work_s`` seconds of work (at the speed
        of a request alone) as the batch allows; the seconds spent computing."""
        job = _Job(max(0.0, work_s))
        with self._cond:
            self._step(self.clock())
            self._queue.append(job)
            while True:
                self._step(self.clock())
                if job.done is not None:
                    self._cond.notify_all()  # a place in the batch is free
                    assert job.started is not None
                    return job.done - job.started
                self._cond.wait(self._until_next())

    def _speed(self) -> float:
        return 1.0 / (1.0 + self.slowdown * (len(self._running) - 1)) if self._running else 0.0

    def _step(self, now: float) -> None:
        """Bring the batch to ``now``: work done at the speed it had, answers finished, waiting
        requests started where there is room."""
        speed, elapsed = self._speed(), max(0.0, now - self._advanced_to)
        self._advanced_to = now
        for job in self._running:
            job.left_s -= elapsed * speed
        finished = [job for job in self._running if job.left_s <= 1e-9]
        for job in finished:
            job.done = now
            self._running.remove(job)
        capacity = self.capacity(now)
        while self._queue and len(self._running) < capacity:
            job = self._queue.popleft()
            job.started = now
            if job.left_s <= 0:
                job.done = now
            else:
                self._running.append(job)
        if finished:
            self._cond.notify_all()

    def _until_next(self) -> float:
        """Seconds to the next thing that changes the batch: an answer finished, a change of
        capacity; at most one second, so that nothing waits on a missed wake-up."""
        now = self.clock()
        waits = [1.0]
        if self._running:
            waits.append(min(job.left_s for job in self._running) / self._speed())
        waits += [self.began + at - now for at, _ in self.capacity_at if self.began + at > now]
        return max(0.001, min(waits))
