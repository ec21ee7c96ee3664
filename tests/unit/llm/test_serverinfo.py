"""What a self-hosted server says of itself, read over real HTTP from the provider simulator
answering as each kind of server: llama.cpp's /props, TGI's /info, vLLM's /v1/models and
/metrics, LiteLLM's /model/info, Ollama's /api/show; and nothing from a server that says nothing."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from prism.llm.endpoints import ServerFacts
from prism.llm.serverinfo import server_facts, waiting_requests
from prism.testing.simulator import Simulator, SimulatorConfig

CHAT = {"model": "simulator", "messages": [{"role": "user", "content": "Rank these. [1] revenue [2] risk"}]}


@pytest.fixture(scope="module")
def simulator():
    with Simulator(SimulatorConfig()) as sim:
        yield sim


def _as(sim: Simulator, **config) -> Simulator:
    sim.config = SimulatorConfig(**config)
    return sim


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_llamacpp_props_give_its_slots_and_context(simulator):
    facts = server_facts(_as(simulator, server_kind="llamacpp", slots=4, context_tokens=8192).url, "simulator")
    assert (facts.slots, facts.context, facts.source) == (4, 8192, "/props")
    assert facts.source_of("slots") == "/props total_slots" and facts.source_of("context") == "/props n_ctx"
    # The older way to have the simulator say it, --props, reads the same.
    assert server_facts(_as(simulator, props=True, slots=2, context_tokens=6000).url, "simulator").slots == 2


def test_tgi_info_gives_its_limit_as_a_ceiling_and_its_input_tokens_as_context(simulator):
    facts = server_facts(_as(simulator, server_kind="tgi", batch_slots=16, context_tokens=8192).url, "simulator")
    assert (facts.slots, facts.enforced_slots, facts.context, facts.source) == (None, 16, 8191, "/info")
    assert facts.source_of("enforced_slots") == "/info max_concurrent_requests"
    assert facts.source_of("context") == "/info max_input_tokens"


def test_vllm_gives_max_model_len_and_where_its_queue_is_reported(simulator):
    sim = _as(simulator, server_kind="vllm", context_tokens=32768)
    facts = server_facts(sim.url, "simulator")
    assert (facts.slots, facts.context, facts.source) == (None, 32768, "/v1/models max_model_len")
    assert facts.queue_metric_url == sim.url.removesuffix("/v1") + "/metrics"
    assert facts.source_of("queue_metric_url") == "/metrics vllm:num_requests_waiting"
    with urllib.request.urlopen(facts.queue_metric_url, timeout=10) as reply:
        assert waiting_requests(reply.read().decode()) == 0


def test_litellm_model_info_gives_the_named_models_input_tokens(simulator):
    url = _as(simulator, server_kind="litellm", context_tokens=128000).url
    facts = server_facts(url, "simulator")
    assert (facts.context, facts.source, facts.source_of("context")) == (
        128000,
        "/model/info",
        "/model/info max_input_tokens",
    )
    assert server_facts(url, "another-model") == ServerFacts()


def test_ollama_show_gives_the_context_it_serves_not_the_trained_one(simulator):
    facts = server_facts(_as(simulator, server_kind="ollama", context_tokens=8192).url, "simulator")
    assert (facts.context, facts.source) == (8192, "/api/show num_ctx")  # its model_info says 65,536


@pytest.mark.parametrize("kind", [None, "vllm", "ollama", "litellm"])
def test_a_server_that_says_nothing_of_itself_gives_nothing(simulator, kind):
    # No context configured: each kind answers in its shape, with nothing in it to read.
    assert server_facts(_as(simulator, server_kind=kind).url, "simulator") == ServerFacts()


def test_a_server_that_answers_nothing_gives_nothing_at_once():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    assert server_facts(f"http://127.0.0.1:{port}/v1", "simulator", timeout_s=2.0) == ServerFacts()
    assert time.monotonic() - started < 1.0  # refused once: nothing more is asked


def test_vllm_metrics_report_the_real_queue_of_a_batching_server(simulator):
    sim = _as(simulator, server_kind="vllm", batch_slots=2, latency_s=0.8, cache=None)
    threads = [threading.Thread(target=_post, args=(f"{sim.url}/chat/completions", CHAT)) for _ in range(5)]
    for thread in threads:
        thread.start()
    time.sleep(0.4)
    with urllib.request.urlopen(sim.url.removesuffix("/v1") + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for thread in threads:
        thread.join()
    assert 'vllm:num_requests_running{model_name="simulator"} 2.0' in text
    assert waiting_requests(text) == 3


def test_tgi_refuses_what_is_over_its_limit_as_overloaded(simulator):
    sim = _as(simulator, server_kind="tgi", batch_slots=2, latency_s=0.6, cache=None)
    replies: list[tuple[int, dict]] = []
    threads = [
        threading.Thread(target=lambda: replies.append(_post(f"{sim.url}/chat/completions", CHAT))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    refused = [body for status, body in replies if status == 429]
    assert len(refused) == 2 and refused[0] == {"error": "Model is overloaded", "error_type": "overloaded"}
    assert sorted(status for status, _ in replies) == [200, 200, 429, 429]
