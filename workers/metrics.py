"""Fleet metrics for Prometheus. Workers add to counters in Redis (one hash for the whole fleet,
so any number of processes and hosts add up); `prism exporter` serves them with the queue
depth at /metrics."""

from __future__ import annotations

from collections import Counter

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from prism.models import CallRecord
from workers import keys
from workers.keys import METRICS as KEY


def record(client: redis.Redis | None, task: str, state: str, calls: list[CallRecord], limiter=None) -> None:
    """Count one finished job and its LLM calls. Never fails the job: metrics are best effort."""
    if client is None:
        return
    fields: Counter[str] = Counter({f"jobs|{task}|{state}": 1})
    for c in calls:
        outcome = "cached" if c.cached else ("error" if c.error else "ok")
        fields[f"calls|{c.stage}|{c.model}|{outcome}"] += 1
        fields[f"tokens|{c.model}|prompt"] += c.usage.prompt_tokens
        fields[f"tokens|{c.model}|completion"] += c.usage.completion_tokens
        fields[f"throttled|{c.model}"] += c.throttled
        fields[f"micro_usd|{c.model}"] += int((c.usd or 0) * 1_000_000)
    if limiter is not None and limiter.waited_s:
        fields["limiter_wait_ms"] += int(limiter.waited_s * 1000)
        limiter.waited_s = 0.0
    try:
        pipe = client.pipeline()
        for field, value in fields.items():
            if value:
                pipe.hincrby(KEY, field, value)
        pipe.execute()
    except redis.RedisError:
        pass


class FleetCollector:
    """Reads the counters and the broker's queue length at each scrape."""

    def __init__(self, client: redis.Redis, queues: tuple[str, ...] = (keys.QUEUE,)):
        self.client, self.queues = client, queues

    def collect(self):
        values = {k.decode(): int(v) for k, v in self.client.hgetall(KEY).items()}
        jobs = CounterMetricFamily("prism_jobs", "Jobs finished, by task and state", labels=["task", "state"])
        calls = CounterMetricFamily(
            "prism_llm_calls", "LLM calls, by stage, model and outcome", labels=["stage", "model", "outcome"]
        )
        tokens = CounterMetricFamily("prism_llm_tokens", "LLM tokens billed", labels=["model", "kind"])
        throttled = CounterMetricFamily("prism_llm_throttled", "Attempts refused with HTTP 429", labels=["model"])
        usd = CounterMetricFamily("prism_llm_usd", "USD spent on priced calls", labels=["model"])
        waits = CounterMetricFamily("prism_limiter_wait_seconds", "Time workers spent waiting on the fleet limiter")
        for field, value in values.items():
            kind, *labels = field.split("|")
            if kind == "jobs":
                jobs.add_metric(labels, value)
            elif kind == "calls":
                calls.add_metric(labels, value)
            elif kind == "tokens":
                tokens.add_metric(labels, value)
            elif kind == "throttled":
                throttled.add_metric(labels, value)
            elif kind == "micro_usd":
                usd.add_metric(labels, value / 1_000_000)
            elif kind == "limiter_wait_ms":
                waits.add_metric([], value / 1000)
        depth = GaugeMetricFamily("prism_queue_depth", "Messages waiting in the broker queue", labels=["queue"])
        for queue in self.queues:  # at every priority
            depth.add_metric([queue], sum(self.client.llen(name) for name in keys.queue_lists(queue)))
        yield from (jobs, calls, tokens, throttled, usd, waits, depth)
