"""Page vectors kept in the results store, so a filing version is embedded once for the whole
fleet and every later run: the dense half of the retriever is the costly one (MiniLM embeds
about 8 pages a second on one core; an API model is paid per page)."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import structlog

from workers.store import Store, vectors_key

log = structlog.get_logger()


class StoreVectors:
    """Vectors as .npy files (no pickles) under ``vectors_key``. A store that cannot be read
    or written costs an embedding, never the job: it is logged and the vectors are made again."""

    def __init__(self, store: Callable[[], Store]):
        self.store = store  # opened on first use

    def get(self, embedder: str, digest: str) -> np.ndarray | None:
        key = vectors_key(embedder, digest)
        try:
            data = self.store().get(key)
        except KeyError:
            return None
        except Exception as err:  # noqa: BLE001 - the store is a cache here
            log.warning("page vectors unreadable", key=key, error=str(err))
            return None
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as err:
            log.warning("page vectors unreadable", key=key, error=str(err))
            return None

    def put(self, embedder: str, digest: str, vectors: np.ndarray) -> None:
        key = vectors_key(embedder, digest)
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(vectors, dtype=np.float32), allow_pickle=False)
        try:
            self.store().put(key, buffer.getvalue(), if_absent=True)
        except Exception as err:  # noqa: BLE001 - the store is a cache here
            log.warning("page vectors not stored", key=key, error=str(err))
