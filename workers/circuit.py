"""Each LLM endpoint's circuit (prism.llm.Circuit): open while the endpoint is down, from its
first failed attempt; one probe per wait tries it; an answer closes it. In Redis, shared by the
fleet; in this process when there is no Redis (an embedded run, whose producer reads the same
object through the runtime). The gateway opens and closes it; the producer reads ``outage`` for
its progress line, `prism status` and its stall watch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from datetime import UTC, datetime

import redis

from prism.llm import Outage
from prism.llm.endpoints import Endpoint
from workers import keys


def endpoints_down(circuits: Circuits, endpoints: Iterable[Endpoint]) -> list[tuple[str, Outage]]:
    """The endpoints that are down now, by URL, with since when."""
    found: dict[str, tuple[str, Outage]] = {}
    for endpoint in endpoints:
        if endpoint.key not in found and (outage := circuits.outage(endpoint.key)) is not None:
            found[endpoint.key] = (endpoint.base_url or "api.openai.com", outage)
    return list(found.values())


class Circuits:
    def __init__(self, client: redis.Redis | None = None):
        self.client = client
        self._open: dict[str, tuple[Outage, float]] = {}  # endpoint -> (outage, when it lapses)
        self._probes: dict[str, float] = {}  # endpoint -> when its probe claim lapses
        self._lock = threading.Lock()

    def outage(self, endpoint: str) -> Outage | None:
        if self.client is not None:
            return _outage(self.client.hgetall(keys.circuit(endpoint)))
        with self._lock:
            return self._local(endpoint)

    def probe(self, endpoint: str, ttl_s: float) -> bool:
        if self.client is not None:
            return bool(self.client.set(keys.circuit_probe(endpoint), 1, nx=True, px=max(1, int(ttl_s * 1000))))
        with self._lock:
            if self._probes.get(endpoint, 0.0) > time.time():
                return False
            self._probes[endpoint] = time.time() + ttl_s
            return True

    def failed(self, endpoint: str, since: float, error: str, ttl_s: float = keys.CIRCUIT_TTL_S) -> Outage:
        """Open the circuit (down since ``since``), or keep it open with this last error, for
        ``ttl_s`` after it unless a probe closes it first."""
        if self.client is not None:
            name = keys.circuit(endpoint)
            pipe = self.client.pipeline()  # MULTI: the first failure's time wins
            pipe.hsetnx(name, "since", repr(since))
            pipe.hset(name, "error", error)
            pipe.expire(name, max(1, int(ttl_s)))
            pipe.hgetall(name)
            outage = _outage(pipe.execute()[-1])
            assert outage is not None
            return outage
        with self._lock:
            current = self._local(endpoint)
            outage = Outage(current.since if current else since, error)
            self._open[endpoint] = (outage, time.time() + ttl_s)
            return outage

    def closed(self, endpoint: str) -> None:
        if self.client is not None:
            self.client.delete(keys.circuit(endpoint), keys.circuit_probe(endpoint))
            return
        with self._lock:
            self._open.pop(endpoint, None)
            self._probes.pop(endpoint, None)

    def _local(self, endpoint: str) -> Outage | None:
        outage, lapses = self._open.get(endpoint, (None, 0.0))
        return outage if time.time() < lapses else None


def _outage(fields: dict) -> Outage | None:
    text = {_str(k): _str(v) for k, v in fields.items()}
    return Outage(float(text["since"]), text.get("error", "")) if "since" in text else None


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def outage_text(outages: Sequence[tuple[str, Outage]]) -> str:
    """'provider unavailable since 14:03:07 UTC (http://host/v1)', the earliest first."""
    ordered = sorted(outages, key=lambda found: found[1].since)
    since = datetime.fromtimestamp(ordered[0][1].since, UTC).strftime("%H:%M:%S UTC")
    return f"provider unavailable since {since} ({', '.join(url for url, _ in ordered)})"


class LearnedContexts(MutableMapping[str, int]):
    """The contexts self-hosted servers turned out to have ("<endpoint>:<model>" -> tokens),
    learned from their overflow replies: in Redis for the fleet and the next run, else here."""

    def __init__(self, client: redis.Redis | None = None):
        self.client = client
        self._here: dict[str, int] = {}

    def __getitem__(self, key: str) -> int:
        if self.client is None:
            return self._here[key]
        value = self.client.hget(keys.LLM_CONTEXTS, key)
        if value is None:
            raise KeyError(key)
        return int(value)

    def __setitem__(self, key: str, value: int) -> None:
        if self.client is None:
            self._here[key] = value
        else:
            self.client.hset(keys.LLM_CONTEXTS, key, value)

    def __delitem__(self, key: str) -> None:
        if self.client is None:
            del self._here[key]
        else:
            self.client.hdel(keys.LLM_CONTEXTS, key)

    def __iter__(self) -> Iterator[str]:
        names = self._here if self.client is None else self.client.hkeys(keys.LLM_CONTEXTS)
        return iter([_str(n) for n in names])

    def __len__(self) -> int:
        return len(self._here) if self.client is None else int(self.client.hlen(keys.LLM_CONTEXTS))
