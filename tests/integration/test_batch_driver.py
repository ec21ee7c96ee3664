"""The batch driver without a fleet: the gateway's requests wait in a run's store, the driver
submits and polls them on the simulator's Batch API, a driver that lost its record adopts the
batch instead of paying again, and the run's budget is charged once per answered line."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
import redis

from prism.llm import AwaitingBatch, BudgetExhausted, Gateway, batching, recording, spending
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig, Usage
from prism.testing.batches import BatchConfig
from prism.testing.simulator import Simulator, SimulatorConfig
from workers.batches import BatchDriver, BatchLimits, StoreBatchQueue
from workers.budget import RunBudget
from workers.cache import TieredCache
from workers.messages import DocumentJob
from workers.runfiles import RunLayout
from workers.store import LocalStore

pytestmark = pytest.mark.integration
QUESTIONS = ["Which filing states the revenue?", "Which filing names the directors?"]


@pytest.fixture()
def sim():
    with Simulator(SimulatorConfig()) as s:
        s.batch.config = BatchConfig(validate_s=0.05, process_s=0.2, finalize_s=0.05)
        yield s


def _job(run_id: str, query_id: str) -> DocumentJob:
    return DocumentJob(
        run_id=run_id,
        results="unused",
        job_id=query_id,
        query_id=query_id,
        line=1,
        config=RunConfig(via="batch"),
        question="q",
        candidates=["10-K"],
    )


def _messages(i: int) -> list[dict]:
    return [{"role": "user", "content": f"{QUESTIONS[i]}\n\n[0] 10-K annual report\n[1] DEF 14A proxy"}]


def _ask(gateway: Gateway, store: LocalStore, run_id: str, i: int):
    """One chat request as a batch-mode job makes it: an answer, or AwaitingBatch."""
    with batching(StoreBatchQueue(store, _job(run_id, f"q{i}"), retry_in=0.1)):
        return gateway.complete(_messages(i), stage="documents", model="gpt-5-mini", max_output_tokens=8)


def _until_ended(driver: BatchDriver) -> None:
    deadline = time.monotonic() + 20
    while driver.tick() and (driver.open_batches or driver.pending):
        assert time.monotonic() < deadline, driver.describe()
        time.sleep(0.05)


def _setup(tmp_path, sim, policy: RetryPolicy | None = None):
    store = LocalStore(tmp_path / "results")
    cache = TieredCache(None, store, 3600, 3600)
    gateway = Gateway(Endpoint(base_url=sim.url, api_key="x"), PriceTable.load(), policy or RetryPolicy(), cache=cache)
    return store, gateway


def test_a_driver_that_lost_its_record_adopts_the_batch_and_pays_each_line_once(tmp_path, sim):
    store, gateway = _setup(tmp_path, sim)
    with recording() as calls:
        for i in range(2):
            with pytest.raises(AwaitingBatch):
                _ask(gateway, store, "r1", i)
    assert calls == []  # nothing sent, nothing paid yet
    first = BatchDriver(store, "r1", gateway, BatchLimits(gather_s=0))
    first.tick()
    (record,) = first.records.values()
    # The producer was killed after submitting, before it stored the batch's id.
    store.delete(RunLayout("r1").batch("batches", record["id"]))
    second = BatchDriver(store, "r1", gateway, BatchLimits(gather_s=0))
    _until_ended(second)
    assert list(second.records) == [record["id"]] and len(sim.batch.batches) == 1
    with recording() as calls:
        answers = [_ask(gateway, store, "r1", i).text for i in range(2)]
    assert all(answers) and calls == []  # the batch's answers, accounted by the driver
    spent = [c for key in store.keys("runs/r1/spent/") for c in _spent(store, key)]
    assert len(spent) == 2 and {c.tier for c in spent} == {"batch"}
    for call in spent:
        assert call.usd == PriceTable.load().usd("gpt-5-mini", call.usage) / 2  # type: ignore[operator]
    second.tick()
    assert len([k for k in store.keys("runs/r1/spent/")]) == 2  # taken in once


def test_a_driver_that_cannot_list_its_batches_submits_nothing_until_it_can(tmp_path, sim):
    """While the provider is down a restarted driver cannot know which lines its lost batch holds:
    it sends nothing (sending them again would pay twice), then adopts the batch once it answers."""
    store, gateway = _setup(tmp_path, sim, RetryPolicy(max_attempts=2, backoff_base_s=0.05, backoff_cap_s=0.1))
    for i in range(2):
        with pytest.raises(AwaitingBatch):
            _ask(gateway, store, "r1", i)
    first = BatchDriver(store, "r1", gateway, BatchLimits(gather_s=0))
    first.tick()
    (record,) = first.records.values()
    store.delete(RunLayout("r1").batch("batches", record["id"]))  # killed before storing it
    sim.outage(30)
    second = BatchDriver(store, "r1", gateway, BatchLimits(gather_s=0))
    assert "waiting for the provider" in second.tick() and len(sim.batch.batches) == 1
    sim.outage(0)
    _until_ended(second)
    assert list(second.records) == [record["id"]] and len(sim.batch.batches) == 1


def _spent(store: LocalStore, key: str):
    from prism.models import Spent

    return Spent.model_validate_json(store.get(key)).calls


def test_the_run_budget_is_charged_with_the_batch_lines_and_stops_new_ones(tmp_path, sim, redis_url):
    store, gateway = _setup(tmp_path, sim)
    client = redis.Redis.from_url(redis_url)
    # Room for one request's reservation (its prompt and output cap at batch prices), not two.
    prompt = gateway.counter.count(_messages(0)[0]["content"]) + 4
    reservation = PriceTable.load().usd("gpt-5-mini", Usage(prompt_tokens=prompt, completion_tokens=8), "batch")
    assert reservation is not None
    budget = RunBudget(client, "r2", reservation * Decimal("1.2"))
    with spending(budget), pytest.raises(AwaitingBatch):
        _ask(gateway, store, "r2", 0)
    driver = BatchDriver(store, "r2", gateway, BatchLimits(gather_s=0), budget)
    _until_ended(driver)
    (call,) = [c for key in store.keys("runs/r2/spent/") for c in _spent(store, key)]
    assert call.usd and budget.spent() >= call.usd > 0 and budget.spent() - call.usd < Decimal("0.000001")
    with spending(budget), pytest.raises(BudgetExhausted):  # the answered line used up the cap
        _ask(gateway, store, "r2", 1)
    assert not list(store.keys(RunLayout("r2").batch("pending")))
