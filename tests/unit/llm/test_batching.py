"""The provider simulator as a batching server: requests computed together, each slower as more
run, the rest queued in arrival order, an abandoned answer computed to its end, and capacity that
changes mid-run; over real HTTP and on the batch alone."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from prism.testing.batching import BatchingCompute
from prism.testing.simulator import Simulator, SimulatorConfig, _capacity_at, _parser

MESSAGES = [{"role": "user", "content": "Rank these passages. [1] revenue [2] risk"}]


def _together(compute: BatchingCompute, works: list[float], gap_s: float = 0.0) -> list[tuple[float, float]]:
    """Each work's (end, seconds computing), all sent from threads at once (or ``gap_s`` apart)."""
    began = time.monotonic()
    ends: list[tuple[float, float]] = [(0.0, 0.0)] * len(works)

    def run(i: int, work: float) -> None:
        took = compute.compute(work)
        ends[i] = (time.monotonic() - began, took)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(works)]
    for thread in threads:
        thread.start()
        time.sleep(gap_s)
    for thread in threads:
        thread.join()
    return ends


def test_a_batch_computes_together_each_slower_as_more_run():
    # Four of 0.2 s alone, four slots, each slower by half per request beside it: 0.2 * 2.5.
    ends = _together(BatchingCompute(4, slowdown=0.5), [0.2] * 4)
    assert all(0.45 <= took <= 0.65 for _, took in ends), ends
    assert max(end for end, _ in ends) < 0.8  # together, not one after another (0.8 s)


def test_what_the_batch_has_no_room_for_waits_in_arrival_order():
    ends = _together(BatchingCompute(2, slowdown=0.0), [0.3] * 4, gap_s=0.02)
    first, second = sorted(end for end, _ in ends[:2]), sorted(end for end, _ in ends[2:])
    assert max(first) < 0.45 and min(second) >= 0.55, ends  # the last two waited for a place
    assert all(0.25 <= took <= 0.4 for _, took in ends)  # waiting is not computing


def test_capacity_changes_at_its_time():
    compute = BatchingCompute(4, slowdown=0.0, capacity_at=((0.2, 1),))
    assert compute.capacity(compute.began) == 4 and compute.capacity(compute.began + 0.25) == 1
    time.sleep(0.25)
    ends = _together(compute, [0.2] * 3)
    assert sorted(end for end, _ in ends)[-1] >= 0.55, ends  # one at a time now


def test_the_simulator_batches_chat_requests_and_computes_abandoned_ones():
    with Simulator(SimulatorConfig(batch_slots=2, latency_s=0.5, cache=None)) as sim:
        client = openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="simulator", messages=MESSAGES)
        time.sleep(0.5)  # the abandoned answer is computed to its end all the same
        assert sim.stats["abandoned"] == 1 and sim.stats["answered"] == 0
        patient = openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0, timeout=10)
        assert patient.chat.completions.create(model="simulator", messages=MESSAGES).choices
        assert sim.stats["answered"] == 1
        assert sim.queue() == (0, 0)


def test_the_command_line_takes_the_new_flags():
    args = _parser().parse_args(
        ["--batch-slots", "16", "--capacity-at", "30:8", "--capacity-at", "90:16", "--server-kind", "vllm"]
    )
    assert (args.batch_slots, args.server_kind, args.batch_slowdown) == (16, "vllm", 0.05)
    assert _capacity_at(args.capacity_at) == ((30.0, 8), (90.0, 16))
    with pytest.raises(SystemExit):
        _capacity_at(["30"])
