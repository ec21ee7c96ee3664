"""A provider outage pauses the jobs that need it instead of failing them: the endpoint's circuit
(in Redis for the fleet, in the process for an embedded run) opens once a call's retries run
out, the jobs wait in the queue, one probe per wait tries the endpoint, and an answer closes it.
Past PRISM_OUTAGE_S the calls fail for good, named so, and `prism resume --failed` finishes the
run once the provider is back."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import redis

from prism.llm import Gateway, LlmError, ProviderUnavailable, ports, recording
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from tests.conftest import ROWS_SAMPLE, fleet_env, prism_cli, read_run, upload_input
from workers import keys
from workers.circuit import Circuits

pytestmark = pytest.mark.integration
SAMPLE = 12  # the bundled sample: 8 document queries and 4 chunk queries
MESSAGES = [
    {
        "role": "user",
        "content": "Question: Q?\n\nFiling types:\n[Document Index 0] DEF14A\n\n[Document Index 1] 10-K\n\nReturn exactly 2 indices.",
    }
]


@pytest.fixture(params=["redis", "in-process"])
def circuits(request, redis_url):
    if request.param == "in-process":
        return Circuits()
    return Circuits(redis.Redis.from_url(redis_url))


@pytest.fixture()
def short_waits(monkeypatch):
    """A probe a second instead of every 5-60 s, so a test sees several."""
    monkeypatch.setattr(ports, "OUTAGE_WAIT_S", (1.0, 1.0))


def test_the_circuit_opens_once_allows_one_probe_per_wait_and_closes(circuits):
    endpoint = f"openai:http://down-{uuid.uuid4().hex[:8]}/v1"
    assert circuits.outage(endpoint) is None
    first = circuits.failed(endpoint, 1000.0, "APIConnectionError: Connection error.")
    assert (first.since, first.error) == (1000.0, "APIConnectionError: Connection error.")
    again = circuits.failed(endpoint, 1005.0, "HTTP 503: overloaded")
    assert (again.since, again.error) == (1000.0, "HTTP 503: overloaded")  # since its first failure
    assert circuits.outage(endpoint) == again
    assert circuits.probe(endpoint, 0.5) and not circuits.probe(endpoint, 0.5)  # one probe at a time
    time.sleep(0.7)
    assert circuits.probe(endpoint, 30)  # the claim lapsed: the next wait's probe
    if circuits.client is not None:
        assert 0 < circuits.client.ttl(keys.circuit(endpoint)) <= keys.CIRCUIT_TTL_S  # forgotten if left
    circuits.closed(endpoint)
    assert circuits.outage(endpoint) is None
    assert circuits.probe(endpoint, 30)  # closing freed the probe too
    circuits.closed(endpoint)
    reopened = circuits.failed(endpoint, 2000.0, "HTTP 502: bad gateway")
    assert reopened.since == 2000.0  # a new outage
    circuits.closed(endpoint)


def gateway(sim, circuits: Circuits, **policy) -> Gateway:
    policy = {"backoff_base_s": 0.05, "backoff_cap_s": 0.2, "timeout_s": 5.0, "max_attempts": 3} | policy
    return Gateway(
        Endpoint(base_url=sim.url, api_key="sk-test"), PriceTable.load(), RetryPolicy(**policy), circuit=circuits
    )


def complete(gw: Gateway):
    return gw.complete(MESSAGES, stage="documents", model="gpt-5-mini")


def test_the_gateway_waits_for_a_down_endpoint_probes_it_and_goes_on(fresh_simulator, circuits, short_waits):
    gw, key = gateway(fresh_simulator, circuits), Endpoint(base_url=fresh_simulator.url).key
    circuits.closed(key)
    fresh_simulator.outage(60, "refuse")
    with recording() as calls, pytest.raises(ProviderUnavailable) as waiting:
        complete(gw)
    assert calls[0].attempts == 3 and "APIConnectionError" in (calls[0].error or "")  # accounted, not billed
    assert calls[0].usd == 0 and waiting.value.retry_in == 1.0
    assert circuits.outage(key) is not None
    refused = fresh_simulator.stats["outage_refused"]
    with recording() as calls, pytest.raises(ProviderUnavailable):
        complete(gw)  # the circuit is open and this wait's probe taken: no request at all
    assert calls == [] and fresh_simulator.stats["outage_refused"] == refused
    time.sleep(1.3)
    with recording() as calls, pytest.raises(ProviderUnavailable):
        complete(gw)  # the probe: tried once, still down
    assert calls[0].attempts == 1 and fresh_simulator.stats["outage_refused"] == refused + 1
    fresh_simulator.outage(0)  # back
    time.sleep(1.3)
    with recording() as calls:
        complete(gw)  # the next probe answers and closes the circuit
    assert calls[0].error is None and circuits.outage(key) is None
    complete(gw)


def test_past_the_outage_window_calls_fail_for_good_naming_the_outage(fresh_simulator, circuits, short_waits):
    gw, key = gateway(fresh_simulator, circuits, outage_s=1.0), Endpoint(base_url=fresh_simulator.url).key
    circuits.closed(key)
    fresh_simulator.outage(60, "503")
    with pytest.raises(ProviderUnavailable):
        complete(gw)
    time.sleep(1.2)
    with recording() as calls, pytest.raises(LlmError) as failed:
        complete(gw)  # past the window: tried once, then a failure
    message = str(failed.value)
    assert f"provider at {fresh_simulator.url} unavailable since" in message, message
    assert "for more than PRISM_OUTAGE_S=1 s: HTTP 503 overloaded" in message, message
    assert calls[0].attempts == 1 and calls[0].error
    fresh_simulator.outage(0)
    complete(gw)  # the provider is back: the first call finds it and closes the circuit
    assert circuits.outage(key) is None


def test_a_run_rides_out_an_outage_and_completes(tmp_path, fresh_simulator):
    fresh_simulator.config.latency_s = 0.2
    fresh_simulator.outage(8, "refuse", after=4)
    env = fleet_env(None, None, fresh_simulator.url, PRISM_CHUNK_RANKER="llm", PRISM_CACHE="false")
    env |= {"PRISM_OUTAGE_S": "120", "PRISM_LLM_MAX_ATTEMPTS": "3", "PRISM_STALL_S": "5"}
    results = tmp_path / "results"
    done = prism_cli(
        ["run", str(ROWS_SAMPLE), "--results", str(results), "--run-id", "paused"], env, tmp_path, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((results / "runs/paused/manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["done"] == SAMPLE, manifest["counts"]
    assert manifest["counts"]["failed"] == 0 and manifest["requeues"] == 0  # waiting is no stall
    assert fresh_simulator.stats["outage_refused"] > 0
    assert "provider unavailable since" in done.stderr and "jobs waiting" in done.stderr, done.stderr[-3000:]
    assert manifest["timings"]["provider_unavailable_s"] > 0
    assert "with the LLM provider unavailable" in done.stdout, done.stdout
    cost = json.loads((results / "runs/paused/cost.json").read_text())
    assert cost["total"]["failed_calls"] > 0  # the attempts that found it down are accounted


def test_an_outage_past_the_window_fails_its_jobs_and_a_resume_finishes_them(tmp_path, fresh_simulator):
    fresh_simulator.outage(120, "refuse")
    env = fleet_env(None, None, fresh_simulator.url, PRISM_CHUNK_RANKER="llm", PRISM_CACHE="false")
    env |= {"PRISM_OUTAGE_S": "3", "PRISM_LLM_MAX_ATTEMPTS": "3"}
    results = tmp_path / "results"
    done = prism_cli(
        ["run", str(ROWS_SAMPLE), "--results", str(results), "--run-id", "outage"], env, tmp_path, timeout=240
    )
    assert done.returncode in (1, 3), done.stderr[-3000:]
    failures = [json.loads(line) for line in (results / "runs/outage/failures.jsonl").read_text().splitlines()]
    assert failures and all("for more than PRISM_OUTAGE_S=3 s" in f["error"] for f in failures), failures[0]
    assert all(f"provider at {fresh_simulator.url} unavailable since" in f["error"] for f in failures)
    fresh_simulator.outage(0)
    resumed = prism_cli(["resume", "outage", "--results", str(results), "--failed"], env, tmp_path, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    manifest = json.loads((results / "runs/outage/manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["done"] == SAMPLE, manifest["counts"]


def test_a_fleet_rides_out_an_outage(tmp_path, redis_url, s3_server, bucket, fresh_simulator, start_worker):
    fresh_simulator.config.latency_s = 0.2
    fresh_simulator.outage(8, "503", after=5)
    source = upload_input(s3_server, bucket, "in/outage.jsonl.gz", documents=12, pages=1)
    env = fleet_env(redis_url, s3_server, fresh_simulator.url, PRISM_CACHE="false", PRISM_STALL_S="5")
    env |= {"PRISM_OUTAGE_S": "120", "PRISM_LLM_MAX_ATTEMPTS": "3"}
    start_worker(env)
    args = ["run", source, "--results", f"s3://{bucket}/prism", "--run-id", "fleet-outage"]
    done = prism_cli(args, env, Path(tmp_path), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    run = read_run(s3_server, bucket, "fleet-outage")
    assert run["manifest"]["status"] == "complete" and run["manifest"]["counts"]["done"] == 13
    assert [f for f in run["failures"] if f["kind"] == "job"] == [] and run["manifest"]["requeues"] == 0
    assert fresh_simulator.stats["outage_refused"] > 0
    assert "provider unavailable since" in done.stderr, done.stderr[-3000:]  # read from Redis
    key = Endpoint(base_url=fresh_simulator.url).key
    assert Circuits(redis.Redis.from_url(redis_url)).outage(key) is None  # the probe closed it
