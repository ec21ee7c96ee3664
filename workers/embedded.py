"""Workers inside the producer's own process, for runs with no broker configured."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery


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
