"""Workers inside the producer's own process, for runs with no broker configured, on an in-memory
broker that keeps the fleet's schedule (priorities) and never makes a free thread wait."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES, memory, virtual

BROKER_URL = "embedded://"
# Celery's blocking loop (the one a transport without an event loop gets) acknowledges a finished
# task only between two waits for messages, and with every thread's task unacknowledged no new
# message is handed out: its 2 s wait would hold each free thread that long. Waiting this long at
# most frees a thread within ~10 ms; an idle loop costs well under 1% of a core.
DRAIN_S = 0.01


class _ByPriority(queue.PriorityQueue):
    """Messages by their priority, lowest number first as on the Redis transport, FIFO within one."""

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self._order = itertools.count()

    def _put(self, message: dict) -> None:
        heapq.heappush(self.queue, (_priority(message), next(self._order), message))

    def _get(self) -> dict:
        return heapq.heappop(self.queue)[2]


def _priority(message: dict) -> int:
    try:
        return int(message["properties"]["priority"])
    except (KeyError, TypeError, ValueError):
        return 0


class Channel(memory.Channel):
    queues: dict[str, _ByPriority] = {}

    def _new_queue(self, queue: str, **kwargs) -> None:
        self._queue_for(queue)

    def _queue_for(self, queue: str) -> _ByPriority:
        if queue not in self.queues:
            self.queues[queue] = _ByPriority()
        return self.queues[queue]


class Transport(memory.Transport):
    Channel = Channel
    global_state = virtual.BrokerState()
    polling_interval = DRAIN_S
    driver_type = driver_name = "embedded"

    def drain_events(self, connection, timeout=None):
        return super().drain_events(connection, timeout=DRAIN_S if timeout is None else min(timeout, DRAIN_S))


TRANSPORT_ALIASES["embedded"] = f"{__name__}:Transport"


@contextmanager
def embedded_worker(app: Celery, concurrency: int = 2) -> Iterator[None]:
    """A Celery worker on threads, consuming the app's in-memory broker until the block ends."""
    # Default for every thread, not only this one: tasks look their app up per thread.
    app.set_default()
    app.set_current()
    worker = app.WorkController(
        pool="threads",
        concurrency=concurrency,
        hostname="embedded@localhost",
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    thread = threading.Thread(target=worker.start, name="embedded-worker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(10)
