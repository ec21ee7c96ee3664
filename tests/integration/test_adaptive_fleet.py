"""An adaptive in-flight limit shared by the fleet: worker processes on one Redis keep to one
limit, one of them steers it, and a worker killed with SIGKILL gives back its slots within
their lease and the lead within its own. Real processes, a real Redis, and the simulator as a
batching server that says nothing of its slots."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from prism.llm.endpoints import InFlight
from prism.testing.simulator import SimulatorConfig
from workers import keys
from workers.slots import FleetSlots, RedisSlots

ROOT = Path(__file__).resolve().parents[2]
LEASE_S, LEAD_S = 2.0, 2.0  # short, for the test: 30 s and 5 s in the fleet

# A worker process: threads sending chat requests through the Gateway for a while, the lease and
# lead shortened; it prints its controller's id, then how many answers it had.
WORKER = f"""
import json, sys, threading, time
import redis
from workers import keys
keys.SLOT_LEASE_S, keys.SLOTS_LEAD_S = {LEASE_S}, {LEAD_S}
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm import Gateway
from prism.llm.pricing import PriceTable
from workers.limiter import FleetLimiter

url, redis_url, model, seconds, threads = sys.argv[1:6]
limiter = FleetLimiter(redis.Redis.from_url(redis_url), {{}}, max_block_s=120)
policy = RetryPolicy(timeout_s=60, max_attempts=1, timeout_retries=0)
gateway = Gateway(Endpoint(base_url=url, api_key="sk-test"), PriceTable.load(), policy, limiter)
print(limiter.slots.process, flush=True)
answered = []
messages = [{{"role": "user", "content": "Rank these passages. [1] revenue [2] risk"}}]

def send():
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        gateway.complete(messages, stage="segments", model=model, max_output_tokens=20)
        answered.append(1)

workers = [threading.Thread(target=send) for _ in range(int(threads))]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({{"answered": len(answered)}}), flush=True)
"""


def _worker(url: str, redis_url: str, model: str, seconds: float, threads: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRISM_", "OPENAI_"))}
    env["PYTHONPATH"] = str(ROOT)
    args = [sys.executable, "-c", WORKER, url, redis_url, model, str(seconds), str(threads)]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _name(sim_url: str, model: str) -> str:
    return keys.slot_name(f"openai:{sim_url}", model)


def _watch(stop: threading.Event, every_s: float, look) -> list:
    seen: list = []

    def run() -> None:
        while not stop.is_set():
            seen.append(look())
            time.sleep(every_s)

    threading.Thread(target=run, daemon=True).start()
    return seen


def test_two_workers_keep_to_one_limit_that_one_of_them_steers(redis_url, fresh_simulator):
    fresh_simulator.config = SimulatorConfig(mode="lexical", batch_slots=4, latency_s=0.25)
    client, model = redis.Redis.from_url(redis_url), f"fleet-{time.time_ns()}"
    name = _name(fresh_simulator.url, model)
    batch = fresh_simulator.batching()
    assert batch is not None
    stop = threading.Event()
    seen = _watch(stop, 0.02, lambda: (sum(batch.counts()), client.get(keys.slots_lead(name))))
    workers = [_worker(fresh_simulator.url, redis_url, model, 15, 8) for _ in range(2)]
    outs = [w.communicate(timeout=120) for w in workers]
    stop.set()
    assert all(w.returncode == 0 for w in workers), [err[-2000:] for _, err in outs]
    answered = [json.loads(out.splitlines()[-1])["answered"] for out, _ in outs]
    assert min(answered) > 5  # both sent and were answered
    path = [limit for _, limit in RedisSlots(client).paths()[name]]
    assert path[0] == 1 and max(path) >= 3  # from one request, grown on both workers' answers
    assert max(in_flight for in_flight, _ in seen) <= max(path)  # never more at the server than the limit
    leads = {lead for _, lead in seen if lead is not None}
    assert len(leads) == 1  # one controller steered throughout, never both
    assert leads == {outs[0][0].splitlines()[0].encode()} or leads == {outs[1][0].splitlines()[0].encode()}


def test_a_killed_worker_gives_back_its_slots_within_the_lease_and_the_lead_within_its_own(
    redis_url, fresh_simulator, monkeypatch
):
    monkeypatch.setattr(keys, "SLOT_LEASE_S", LEASE_S)
    monkeypatch.setattr(keys, "SLOTS_LEAD_S", LEAD_S)
    fresh_simulator.config = SimulatorConfig(mode="lexical", batch_slots=16, latency_s=30)  # answers nobody waits for
    client, model = redis.Redis.from_url(redis_url), f"killed-{time.time_ns()}"
    name, board = _name(fresh_simulator.url, model), RedisSlots(client)
    board.publish(name, 4, "a test's limit", None)
    killed = _worker(fresh_simulator.url, redis_url, model, 60, 6)  # 4 in flight, 2 waiting (and steering)
    process = killed.stdout.readline().strip() if killed.stdout else ""
    deadline = time.monotonic() + 30
    while not (board.in_use().get(name) and board.in_use()[name].held == 4 and client.get(keys.slots_lead(name))):
        assert time.monotonic() < deadline, killed.stderr.read() if killed.stderr else ""
        time.sleep(0.05)
    assert client.get(keys.slots_lead(name)) == process.encode()
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    gone = time.monotonic()
    survivor = FleetSlots(board, max_block_s=LEASE_S + 2)
    limit = InFlight(None, "a test's adaptive limit", start=1, ceiling=8, timeout_s=60)
    with survivor.slot(f"openai:{fresh_simulator.url}", model, limit) as in_flight:
        back_s = time.monotonic() - gone
        assert in_flight == 1  # the killed worker's four leases lapsed, none renewed
    assert back_s <= LEASE_S + 0.5
    while client.get(keys.slots_lead(name)) != survivor.process.encode():
        assert time.monotonic() - gone <= LEAD_S + 1.5
        time.sleep(0.05)
        survivor.steer(name, limit)
