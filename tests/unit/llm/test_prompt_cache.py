"""The simulator's model of the provider's prompt cache: exact prefixes in 128-token blocks past
1,024 tokens, one cache per machine, routing by the first tokens and the key, spill-over above
the per-route rate, idle expiry; and the prompt layouts that do or do not share a prefix."""

from __future__ import annotations

import pytest

from prism.llm import prefix_id, prompt_cache_key
from prism.ranking import prompts
from prism.testing.prompt_cache import CacheModel, PromptCache
from prism.testing.simulator import REASONING_SHARES, Simulator, SimulatorConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cache(**model) -> tuple[PromptCache, Clock]:
    clock = Clock()
    return PromptCache(CacheModel(**model), clock), clock


def test_a_repeated_prefix_hits_in_128_token_blocks_past_the_minimum():
    pc, _ = cache(machines=1)
    first = list(range(3000))
    assert pc.serve(first)[0] == 0  # cold
    assert pc.serve(first)[0] == 1024 + 15 * 128  # 2944: the largest block boundary under 3000
    # Shares the first 1,500 tokens only: the hit stops at the last whole block inside them.
    other = list(range(1500)) + [9] * 1500
    assert pc.serve(other)[0] == 1408


def test_under_the_minimum_nothing_is_cached():
    pc, _ = cache(machines=1)
    short = list(range(1023))
    pc.serve(short)
    assert pc.serve(short)[0] == 0
    assert pc.serve(list(range(1100)))[0] == 0  # nothing was written by the short prompt
    assert pc.serve(list(range(1100)))[0] == 1024


def test_a_prefix_is_read_only_after_it_was_written_and_lapses_when_idle():
    pc, clock = cache(machines=1, idle_s=300)
    prompt = list(range(2048))
    pc.serve(prompt, ready_after_s=2.0)
    clock.now += 1.0
    assert pc.serve(prompt)[0] == 0  # sent while the first was still being read in
    clock.now += 2.0
    assert pc.serve(prompt)[0] == 2048
    clock.now += 299  # a hit keeps it alive
    assert pc.serve(prompt)[0] == 2048
    clock.now += 301
    assert pc.serve(prompt)[0] == 0
    clock.now += 1
    pc.serve(prompt, long=True)
    clock.now += 3600
    assert pc.serve(prompt)[0] == 2048  # 24 h retention


def test_traffic_over_the_route_rate_spills_to_a_cold_machine():
    pc, clock = cache(machines=4, route_rpm=3, window_s=60)
    prompt = list(range(2048))
    results = [pc.serve(prompt, key="k") for _ in range(6)]
    machines = [m for _, m in results]
    assert machines[:3] == [machines[0]] * 3 and machines[3:] == [machines[3]] * 3 and machines[3] != machines[0]
    assert [c for c, _ in results] == [0, 2048, 2048, 0, 2048, 2048]  # each new machine: one miss
    clock.now += 61  # the window has passed: back to the home machine, still warm
    assert pc.serve(prompt, key="k") == (2048, machines[0])


def test_the_ceiling_keeps_what_spill_over_keys_and_expiry_lose():
    clock = Clock()
    provider = PromptCache(CacheModel(machines=4, route_rpm=1, idle_s=300), clock)
    ceiling = PromptCache(CacheModel.ceiling(), clock)
    prompt = list(range(2048))
    sent = [("a", 0.0), ("a", 1.0), ("b", 1.0), ("a", 10_000.0)]  # spill, another key, lapsed
    got = []
    for key, wait in sent:
        clock.now += wait
        got.append((provider.serve(prompt, key=key)[0], ceiling.serve(prompt, key=key)[0]))
    assert got[1][0] == got[3][0] == 0  # the provider: spilled to a cold machine; lapsed
    assert [c for _, c in got] == [0, 2048, 2048, 2048]


def test_the_key_and_the_first_tokens_choose_the_machine():
    pc, _ = cache(machines=64)
    prompt = list(range(2048))
    homes = {pc.serve(prompt, key=f"key-{i}")[1] for i in range(20)}
    assert len(homes) > 5  # keys spread one prefix's traffic, each key to one home
    assert pc.serve(prompt, key="key-0")[1] == pc.serve(prompt, key="key-0")[1]


def _request(layout: str, question: str, chunks: list[str], key: str | None, **extra) -> dict:
    messages = prompts.load("chunks", "p4", layout).messages(question, chunks, 3)
    return {"model": "gpt-5-mini", "messages": messages, **({"prompt_cache_key": key} if key else {}), **extra}


CHUNKS = [f"Note {i}: revenue of segment {i} grew {i} percent on higher volume and pricing. " * 12 for i in range(12)]


@pytest.mark.parametrize("layout, shared", [("question_last", True), ("question_first", False)])
def test_questions_over_one_segment_share_the_cached_prefix_only_with_the_question_last(layout, shared):
    sim = Simulator(SimulatorConfig(seed=1)).start()
    key = prompt_cache_key("gpt-5-mini", prefix_id(CHUNKS))
    try:
        usage = []
        for question in ("What was revenue growth in segment 3?", "Which segment grew the most?"):
            status, body, _, _ = sim.answer(_request(layout, question, CHUNKS, key))
            assert status == 200
            usage.append(body["usage"])
    finally:
        sim.stop()
    assert usage[0]["prompt_tokens"] > 1024 and usage[0]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = usage[1]["prompt_tokens_details"]["cached_tokens"]
    if shared:
        # All but the question, the contract and the last partial block.
        assert 0 < usage[1]["prompt_tokens"] - cached < 128 + 40
        assert cached % 128 == 0
    else:
        assert cached == 0


def test_reasoning_tokens_are_part_of_the_completion_and_follow_the_effort():
    sim = Simulator(SimulatorConfig(reasoning_share=REASONING_SHARES)).start()
    try:
        out = {
            e: sim.answer(_request("question_last", "Which grew?", CHUNKS, None, reasoning_effort=e))[1]["usage"]
            for e in ("low", "high")
        }
        default = sim.answer(_request("question_last", "Which grew?", CHUNKS, None))[1]["usage"]
    finally:
        sim.stop()
    for usage in (*out.values(), default):
        reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
        assert 0 < reasoning < usage["completion_tokens"]
    assert out["high"]["completion_tokens_details"]["reasoning_tokens"] == pytest.approx(
        4 * out["low"]["completion_tokens_details"]["reasoning_tokens"], abs=2
    )
    prompt = default["prompt_tokens"]
    assert default["completion_tokens_details"]["reasoning_tokens"] == round(0.18 * prompt)


def test_24h_retention_only_where_the_model_has_it_and_flex_refusals_only_for_flex():
    sim = Simulator(SimulatorConfig()).start()
    try:
        assert sim.answer(_request("question_last", "q?", CHUNKS, "k", prompt_cache_retention="24h"))[0] == 400
        ok = _request("question_last", "q?", CHUNKS, "k", prompt_cache_retention="24h") | {"model": "gpt-5"}
        assert sim.answer(ok)[0] == 200
        sim.script("flex_unavailable")
        assert sim.answer(_request("question_last", "q?", CHUNKS, "k"))[0] == 200  # standard: not refused
        sim.script("flex_unavailable")
        status, body, _, _ = sim.answer(_request("question_last", "q?", CHUNKS, "k", service_tier="flex"))
        assert status == 429 and body["error"]["code"] == "resource_unavailable"
        status, body, _, _ = sim.answer(_request("question_last", "q?", CHUNKS, "k", service_tier="flex"))
        assert status == 200 and body["service_tier"] == "flex"
    finally:
        sim.stop()
