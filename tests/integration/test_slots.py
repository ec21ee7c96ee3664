"""Self-hosted servers as teams run them: a cap on requests in flight per (endpoint, model) for the
whole fleet (leases in Redis, so a killed worker's slot comes back), taken before the request's
timeout starts; the cap and the context from what the server says of itself (llama.cpp's
/props), else conservative defaults; the context learned from an overflow reply; a run's
segments fitted to it. Against the simulator in its one-slot mode, which queues requests and
computes an abandoned answer to its end, as llama.cpp does."""

from __future__ import annotations

import json
import threading
import time

import pytest

from prism.llm import ContextTooLong, Gateway, RateLimited
from prism.llm.endpoints import Endpoint, InFlight, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.testing.simulator import SimulatorConfig
from producer.sample import SAMPLE
from workers import keys
from workers.limiter import FleetLimiter
from workers.slots import RedisSlots, SlotsNow, slots_text
from workers.testing import fleet_env, prism_cli

ONE = InFlight(1, "a test's cap")
MESSAGES = [{"role": "user", "content": "Rank these passages for the question. [1] revenue [2] risk"}]


def _gateway(sim, concurrency=None, timeout_s: float = 30.0, limiter=None) -> Gateway:
    policy = RetryPolicy(timeout_s=timeout_s, timeout_retries=0, max_attempts=1)
    return Gateway(
        Endpoint(base_url=sim.url, api_key="sk-test"),
        PriceTable.load(),
        policy,
        limiter or FleetLimiter(None, {}, max_block_s=30.0),
        concurrency=concurrency,
    )


def _send_all(gateway: Gateway, n: int) -> list[BaseException | None]:
    """n requests from n threads at once: the error of each, None where it was answered."""
    errors: list[BaseException | None] = [None] * n

    def send(i: int) -> None:
        try:
            gateway.complete(MESSAGES, stage="segments", model="local", max_output_tokens=50)
        except Exception as err:  # noqa: BLE001 - the test reads each
            errors[i] = err

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_a_one_slot_server_answers_everything_in_time_once_requests_wait_for_its_slot(fresh_simulator):
    fresh_simulator.config = SimulatorConfig(mode="lexical", latency_s=0.6, slots=1)
    uncapped = _send_all(_gateway(fresh_simulator, {"*": 0}, timeout_s=1.0), 4)
    assert sum(e is not None for e in uncapped) >= 2  # the third and fourth wait past their timeout
    while fresh_simulator.stats["in_flight"]:
        time.sleep(0.1)
    assert fresh_simulator.stats["abandoned"] >= 2  # computed anyway, for nobody
    fresh_simulator.stats.clear()
    capped = _send_all(_gateway(fresh_simulator, timeout_s=1.0), 4)  # the default: 1 at a time
    assert capped == [None] * 4  # waiting for the slot is not the request's timeout
    assert fresh_simulator.stats["answered"] == 4 and fresh_simulator.stats["abandoned"] == 0


def test_the_cap_holds_across_the_fleet_and_a_killed_workers_slot_comes_back(redis_url, monkeypatch):
    import redis

    client = redis.Redis.from_url(redis_url)
    monkeypatch.setattr(keys, "SLOT_LEASE_S", 1.0)
    endpoint, model = "openai:http://127.0.0.1:1/v1", f"test:{time.time_ns()}"  # a colon, as Ollama's models have
    name = keys.slot_name(endpoint, model)
    assert RedisSlots(client).take(name, "a-worker-killed-mid-request", 1) == (1, 1)  # never released
    limiter = FleetLimiter(client, {}, max_block_s=0.2)
    with pytest.raises(RateLimited, match=r"all 1 slot\(s\) of .* in use"):
        with limiter.slot(endpoint, model, ONE):
            pass
    assert limiter.slots.in_use()[name] == SlotsNow(1, 1)  # what `prism status` shows
    assert slots_text({name: SlotsNow(1, 1)}) == f"LLM slots 1/1 (http://127.0.0.1:1/v1 {model})"
    adapting = SlotsNow(11, 12, "adapting: latency 1.10x its floor, throughput still rising")
    said = "LLM 12 at a time (adapting: latency 1.10x its floor, throughput still rising), 11 in flight"
    assert slots_text({name: adapting}) == f"{said} (http://127.0.0.1:1/v1 {model})"
    time.sleep(1.1)  # its lease lapses
    with limiter.slot(endpoint, model, ONE):
        assert limiter.slots.in_use()[name] == SlotsNow(1, 1)
    assert limiter.slots.in_use()[name] == SlotsNow(0, 1)


def test_a_long_request_keeps_its_slot_past_the_lease(redis_url, monkeypatch):
    import redis

    client = redis.Redis.from_url(redis_url)
    monkeypatch.setattr(keys, "SLOT_LEASE_S", 0.6)
    endpoint, model = "openai:http://127.0.0.1:2/v1", f"test-{time.time_ns()}"
    holder, other = FleetLimiter(client, {}, max_block_s=0.1), FleetLimiter(client, {}, max_block_s=0.1)
    with holder.slot(endpoint, model, ONE):
        time.sleep(1.5)  # well past one lease: renewed meanwhile
        with pytest.raises(RateLimited):
            with other.slot(endpoint, model, ONE):
                pass


def test_the_limit_and_the_context_come_from_what_the_server_says(fresh_simulator):
    fresh_simulator.config = SimulatorConfig(mode="lexical", slots=3, props=True, context_tokens=8192)
    gateway = _gateway(fresh_simulator)
    endpoint = gateway.endpoint("segments")
    said = gateway.in_flight(endpoint, "local")  # llama.cpp's slots: where it starts, and its ceiling
    assert (said.adaptive, said.start, said.ceiling, said.enforced) == (True, 3, 3, True)
    assert said.source == "the server's /props total_slots"
    assert gateway.context(endpoint, "local") == (8192, "the server's /props n_ctx")
    fresh_simulator.config = SimulatorConfig(mode="lexical")  # says nothing, as llama-cpp-python
    quiet = _gateway(fresh_simulator)
    said = quiet.in_flight(endpoint, "local")  # from one request, up to the bound
    assert (said.adaptive, said.start, said.ceiling, said.enforced) == (True, 1, 64, False)
    assert quiet.context(endpoint, "local")[0] is None
    assert _gateway(fresh_simulator, {"local": 2}).in_flight(endpoint, "local") == InFlight(2, "PRISM_LLM_CONCURRENCY")
    hosted = Endpoint(api_key="sk-test")
    assert quiet.in_flight(hosted, "gpt-5-mini").cap == 0


@pytest.mark.parametrize("shape", ["openai", "llama.cpp"])
def test_an_overflow_reply_teaches_the_endpoint_its_context(fresh_simulator, shape):
    fresh_simulator.config = SimulatorConfig(mode="lexical", context_tokens=300, overflow_error=shape)
    gateway = _gateway(fresh_simulator)
    long = [{"role": "user", "content": "revenue grew " * 400}]
    with pytest.raises(ContextTooLong):
        gateway.complete(long, stage="segments", model="local", max_output_tokens=50)
    assert gateway.context(gateway.endpoint("segments"), "local") == (300, "learned from its overflow reply")


def test_a_run_fits_its_segments_to_the_servers_context_and_says_its_cap(tmp_path, fresh_simulator):
    fresh_simulator.config = SimulatorConfig(mode="lexical", slots=2, props=True, context_tokens=6000)
    env = fleet_env(
        None,
        None,
        fresh_simulator.url,
        PRISM_LLM_CONCURRENCY="{}",
        PRISM_RESULTS=str(tmp_path / "results"),
        PRISM_DOC_RANKER="prior",
        PRISM_CHUNK_RANKER="llm",
        PRISM_CHECK_SYSTEM_PROMPT="false",
    )
    del env["PRISM_SEGMENT_TOKENS"]  # fitted to the server, as a user who sets none has it
    assert prism_cli(["ingest", str(SAMPLE / "filings"), "--corpus", "corpus"], env, tmp_path).returncode == 0
    run = ["run", "--questions", str(SAMPLE / "questions.jsonl"), "--corpus", "corpus", "--limit", "1"]
    done = prism_cli([*run, "--run-id", "fitted"], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    said = "(gpt-5-mini): adapting from 2 request(s) at a time, up to the server's 2 slots: the server's /props total_slots"
    assert said in done.stderr
    assert "a context of 6,000 (the server's /props n_ctx)" in done.stderr
    manifest = json.loads((tmp_path / "results" / "runs" / "fitted" / "manifest.json").read_text())
    assert 256 <= manifest["config"]["segment_tokens"] < 6000 - 1000
    (name, path), *others = manifest["in_flight"].items()  # the limit's path over the run
    assert not others and name.endswith(" gpt-5-mini") and path[0][1] == 2 and all(p[1] <= 2 for p in path)
    given = prism_cli([*run, "--run-id", "given"], env | {"PRISM_SEGMENT_TOKENS": "3000"}, tmp_path, timeout=300)
    assert given.returncode == 0 and "segments of" not in given.stderr
    manifest = json.loads((tmp_path / "results" / "runs" / "given" / "manifest.json").read_text())
    assert manifest["config"]["segment_tokens"] == 3000  # set by hand: it wins


@pytest.mark.parametrize(
    ("kind", "context", "budget"),
    [
        ("litellm", 128_000, 32_000),  # a gateway in front of a hosted API: the hosted segment size
        ("tgi", 8_192, None),  # its /info: segments fitted under 8,192
        ("ollama", 8_192, None),  # the num_ctx it serves, not the model's trained context
        (None, None, None),  # says nothing: the conservative default
    ],
)
def test_segments_fit_what_each_kind_of_server_says_of_its_context(fresh_simulator, kind, context, budget):
    from producer.config import resolved_config
    from workers.settings import load_settings

    fresh_simulator.config = SimulatorConfig(mode="lexical", server_kind=kind, context_tokens=context or 4096)
    settings = load_settings(
        llm_base_url=fresh_simulator.url, llm_api_key="sk-test", llm_model="simulator", chunk_ranker="llm"
    )
    said: list[str] = []
    config = resolved_config(settings, said.append)
    if budget is not None:
        assert config.segment_tokens == budget
    elif context is not None:
        assert config.segment_tokens < context - 1000 and f"a context of {context - (kind == 'tgi'):,}" in said[-1]
    else:
        assert config.segment_tokens <= 4096 and "a conservative default" in said[-1]
