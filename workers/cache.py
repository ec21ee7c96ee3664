"""The LLM response cache: Redis for the hot set, the results store (S3) for the durable one.
Identical requests (endpoint, model, messages, parameters) are answered from it, so a rerun over
unchanged inputs makes no LLM calls."""

from __future__ import annotations

import json
import time

import redis
import structlog

from workers import keys
from workers.store import Store

log = structlog.get_logger("prism")

DURABLE_PREFIX = "cache/llm/"  # the durable cache's answers, in the results store or PRISM_CACHE_URI


def remove_expired(store: Store, ttl_s: float, now: float | None = None) -> int:
    """Delete the durable answers written more than ``ttl_s`` ago (a read would take them for a
    miss anyway), so the cache holds what the last ``ttl_s`` asked; returns how many went."""
    cutoff = (time.time() if now is None else now) - ttl_s
    old = [key for key, written in store.modified(DURABLE_PREFIX) if written < cutoff]
    store.delete_many(old)
    return len(old)


class TieredCache:
    def __init__(self, hot: redis.Redis | None, durable: Store | None, hot_ttl_s: int, ttl_s: int):
        self.hot, self.durable, self.hot_ttl_s, self.ttl_s = hot, durable, hot_ttl_s, ttl_s

    @staticmethod
    def _key(key: str) -> str:
        return f"{DURABLE_PREFIX}{key[:2]}/{key}.json"

    def get(self, key: str) -> dict | None:
        if self.hot is not None:
            try:
                if (raw := self.hot.get(keys.cache(key))) is not None:
                    return json.loads(raw)
            except redis.RedisError:
                pass  # a cache outage costs money, not correctness
        if self.durable is not None:
            try:
                value = json.loads(self.durable.get(self._key(key)))
            except KeyError:
                return None
            except Exception as err:  # noqa: BLE001 - the store is down: a miss, not a failure
                log.warning("cache read failed", error=str(err))
                return None
            if value.get("expires_at", float("inf")) < time.time():
                return None
            self._put_hot(key, value)
            return value
        return None

    def put(self, key: str, value: dict) -> None:
        value = value | {"expires_at": time.time() + self.ttl_s}
        self._put_hot(key, value)
        if self.durable is not None:
            try:
                self.durable.put(self._key(key), json.dumps(value).encode())
            except Exception as err:  # noqa: BLE001 - the answer is paid for and must still be used
                log.warning("cache write failed", error=str(err))

    def _put_hot(self, key: str, value: dict) -> None:
        if self.hot is not None:
            try:
                self.hot.set(keys.cache(key), json.dumps(value), ex=self.hot_ttl_s)
            except redis.RedisError:
                pass
