"""Every Redis key the fleet writes either expires or is one of a fixed few whose size the work in
flight bounds: after several nights on a fleet, the keys are listed and each is checked."""

from __future__ import annotations

import re

import pytest
import redis

from prism.testing.simulator import SimulatorConfig
from workers import keys
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.integration

# Kept for the fleet's life, each bounded by something other than the nights run: the queue's
# lists (the work in flight), the metrics hash (one counter per name), the servers' learned
# contexts (one per endpoint and model), and the broker transport's own bookkeeping.
LASTING = {
    *keys.queue_lists(),
    keys.METRICS,
    keys.LLM_CONTEXTS,
    "unacked",
    "unacked_index",
    "unacked_mutex",
}
LASTING_PATTERN = re.compile(r"_kombu\.binding[._].*")  # the exchanges and their queues
PER_RUN = re.compile(r"prism:(run:[0-9a-f]{12}|budget):(?P<run>[^:]+):")


def test_after_several_nights_every_key_expires_or_is_bounded(
    tmp_path, redis_url, s3_server, bucket, simulator, start_worker
):
    simulator.config = SimulatorConfig(mode="lexical")
    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # this module's keys alone: the tests before it in this process used the same DB
    env = fleet_env(redis_url, s3_server, simulator.url, PRISM_RESULTS=f"s3://{bucket}/prism", PRISM_STALL_S="5")
    start_worker(env)
    assert prism_cli(["sample", "demo"], env, tmp_path).returncode == 0
    lines = (tmp_path / "demo" / "questions.jsonl").read_text().splitlines()[:4]
    (tmp_path / "q.jsonl").write_text("".join(line + "\n" for line in lines))
    corpus = f"s3://{bucket}/corpus"
    assert prism_cli(["ingest", "demo/filings", "--corpus", corpus], env, tmp_path).returncode == 0
    counts = []
    for night in range(3):
        args = ["run", "--questions", "q.jsonl", "--corpus", corpus, "--new", "--run-id", f"n{night}"]
        done = prism_cli([*args, "--budget-usd", "5"], env, tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        counts.append(client.dbsize())

    listed = [k.decode() for k in client.scan_iter(count=1000)]
    lasting = [k for k in listed if client.ttl(k) == -1]
    unbounded = [k for k in lasting if k not in LASTING and not LASTING_PATTERN.fullmatch(k)]
    assert not unbounded, unbounded  # every other key has an expiry
    runs = {m["run"] for k in listed if (m := PER_RUN.match(k))}
    assert runs == {"n0", "n1", "n2"}, runs  # a run's keys name it, and expire with it
    per_run = [k for k in listed if PER_RUN.match(k)]
    assert len(per_run) <= 3 * 6, per_run  # a handful a run: progress, plans, planned, budget
    assert counts[2] - counts[1] <= counts[1] - counts[0] + 1, counts  # each night adds the same few
