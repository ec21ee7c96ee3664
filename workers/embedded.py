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
from celery.backends.cache import CacheBackend
from kombu.transport import TRANSPORT_ALIASES, memory, virtual
from kombu.utils.encoding import bytes_to_str

BROKER_URL = "embedded://"
RESULT_BACKEND = f"{__name__}:ResultBackend+memory://"  # the cache backend's in-memory client
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


class ResultBackend(CacheBackend):
    """Celery's in-memory result backend, without a wait: once a chord's last part has
    returned, its parts are all stored and one read finds them, yet Celery's read loop then
    sleeps half a second before it looks whether any is missing, holding a worker thread that
    long per chord (a 100-question run waited 25 s of its 28)."""

    def get_many(self, task_ids, *args, **kwargs):
        missing = {bytes_to_str(t) for t in task_ids}
        for task_id, meta in super().get_many(task_ids, *args, **kwargs):
            yield task_id, meta
            missing.discard(task_id)
            if not missing:
                return


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
