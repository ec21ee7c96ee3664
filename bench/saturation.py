"""Limit saturation: how close the fleet runs to the provider's tokens/min ceiling without
tripping it, against a naive client, in the same run, on the same simulator.

The simulator enforces a requests and a tokens limit over an exact sliding window (10 s here,
to keep the run short; the arithmetic is the same per minute) and answers with 0.5 s latency.
Fleet: `prism run` on 600 document rows with 4 worker processes (4 threads each) sharing the
limiter in Redis. Naive: the openai SDK's async client with its default retries and an asyncio
semaphore of 8, sending the same prompts. Saturation = tokens served per second over the ceiling
rate, measured after the first window (an empty window admits one burst).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import openai
from _common import Fleet, document_lines, parser, report

from prism.datasets import parse_row
from prism.ranking import prompts
from prism.testing.simulator import Simulator, SimulatorConfig
from producer.prompt_check import CHECK_NAME

JOBS, WINDOW_S, TOKENS, REQUESTS, LATENCY_S = 600, 10.0, 50_000, 150, 0.5
KEYS = ("saturation", "per1000_429", "lost", "duplicated", "naive_per1000_429")


def phase(sim: Simulator, started: float, window_s: float, tokens: int) -> tuple[float, int]:
    """(saturation, requests answered) since ``started``. The rate is the slope of cumulative
    tokens served over time, fitted between the first and the last window: an empty window at
    the start admits one burst, and the end trails off, so both edges are left out."""
    points = [(at, t) for at, t in sim.served if at >= started]
    times = np.array([at for at, _ in points])
    cumulative = np.cumsum([t for _, t in points])
    steady = (times >= times[0] + window_s) & (times <= times[-1] - window_s)
    slope = np.polyfit(times[steady], cumulative[steady], 1)[0]
    return slope / (tokens / window_s), len(points)


async def naive(sim: Simulator, queries) -> int:
    """The usual client: the SDK's own retries (2, honouring Retry-After), 8 at a time."""
    client = openai.AsyncOpenAI(base_url=sim.url, api_key="sk-bench")
    gate = asyncio.Semaphore(8)
    template = prompts.load("documents", "p4")
    lost = 0

    async def one(q):
        nonlocal lost
        async with gate:
            try:
                await client.chat.completions.create(
                    model="gpt-5-mini", messages=template.messages(q.question, q.candidates, 5)
                )
            except openai.OpenAIError:
                lost += 1

    await asyncio.gather(*(one(q) for q in queries))
    return lost


def main() -> None:
    # --quick: a 3 s window, its limits scaled down with it, and as many jobs as four windows take
    jobs, window, tokens, requests = (
        (180, 3, 15_000, 45) if parser(__doc__).parse_args().quick else (JOBS, 10, TOKENS, REQUESTS)
    )
    lines = document_lines(2 * jobs)
    fleet_lines, naive_queries = lines[:jobs], [parse_row(line, i) for i, line in enumerate(lines[jobs:], 1)]
    config = SimulatorConfig(mode="oracle", latency_s=LATENCY_S, rpm=requests, tpm=tokens, window_s=float(window))
    limits = json.dumps({"*": {"requests": f"{requests}/{window} seconds", "tokens": f"{tokens}/{window} seconds"}})
    with tempfile.TemporaryDirectory() as tmp, Simulator(config) as sim:
        sim.add_queries(parse_row(line, i) for i, line in enumerate(lines, 1))
        env = {"PRISM_LLM_LIMITS": limits, "PRISM_CACHE": "false", "PRISM_LLM_EXPECTED_OUTPUT_TOKENS": "100"}
        with Fleet(sim, Path(tmp), **env) as fleet:
            source = fleet.upload("saturation.jsonl.gz", fleet_lines)
            fleet.start_workers(4, concurrency=4, pool="threads")
            before, started = sim.stats["429_limit"], time.monotonic()
            run = fleet.run(source, "saturation")
            throttled = sim.stats["429_limit"] - before
            saturation, answered = phase(sim, started, window, tokens)
        counts = run["manifest"]["counts"]
        lost = jobs - counts["done"] - counts["failed"]
        print(
            f"fleet: {counts['done']} done, {counts['failed']} failed, {answered} calls, {throttled} refused with 429, saturation {saturation:.3f}",
            flush=True,
        )

        time.sleep(window)  # let the provider's window empty
        before, started = sim.stats["429_limit"], time.monotonic()
        naive_lost = asyncio.run(naive(sim, naive_queries))
        naive_throttled = sim.stats["429_limit"] - before
        naive_saturation, naive_answered = phase(sim, started, window, tokens)
        print(
            f"naive: {naive_answered} answered, {naive_lost} lost, {naive_throttled} refused with 429, saturation {naive_saturation:.3f}",
            flush=True,
        )
    report(
        saturation=round(saturation, 4),
        per1000_429=round(1000 * throttled / max(answered, 1), 2),
        lost=lost,
        duplicated=sum(not key.endswith(f"/{CHECK_NAME}.json") for key in run["spent"]),  # jobs delivered twice
        failed=counts["failed"],
        naive_saturation=round(naive_saturation, 4),
        naive_per1000_429=round(1000 * naive_throttled / max(naive_answered, 1), 2),
        naive_lost=naive_lost,
    )


if __name__ == "__main__":
    main()
