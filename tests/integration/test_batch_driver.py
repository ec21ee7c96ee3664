"""The batch driver without a fleet: the gateway's requests wait in a run's store, the driver
submits and polls them on the simulator's Batch API, a driver that lost its record adopts the
batch instead of paying again, and the run's budget is charged once per answered line."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
import redis

from prism.llm import AwaitingBatch, BudgetExhausted, Gateway, batching, recording, spending
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from prism.models import RunConfig, Usage
from prism.testing.batches import BatchConfig
from prism.testing.simulator import Simulator, SimulatorConfig
from workers import keys
from workers.batches import BatchClaims, BatchDriver, BatchLimits, StoreBatchQueue
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


class _ReadTogether(Gateway):
    """A gateway whose batch listing, the last read of a tick before it collects the waiting
    requests, waits for the other driver's: both have read the same requests before either
    takes one, as when a tick outlives its lock and the next one starts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = threading.Barrier(2)

    def list_batches(self, stage):
        listed = super().list_batches(stage)
        self.read.wait(timeout=30)
        return listed


def _claims(kind: str, redis_url: str) -> BatchClaims:
    return BatchClaims(redis.Redis.from_url(redis_url) if kind == "fleet" else None)


@pytest.mark.parametrize("kind", ["fleet", "process"])
def test_two_drivers_that_read_the_same_requests_put_each_in_one_batch(tmp_path, sim, redis_url, kind):
    store = LocalStore(tmp_path / "results")
    cache = TieredCache(None, store, 3600, 3600)
    gateway = _ReadTogether(Endpoint(base_url=sim.url, api_key="x"), PriceTable.load(), RetryPolicy(), cache=cache)
    for i in range(2):
        with pytest.raises(AwaitingBatch):
            _ask(gateway, store, "r3", i)
    claims = _claims(kind, redis_url)
    drivers = [BatchDriver(store, "r3", gateway, BatchLimits(gather_s=0), claims=claims) for _ in range(2)]
    ticks = [threading.Thread(target=d.tick) for d in drivers]
    for t in ticks:
        t.start()
    for t in ticks:
        t.join()
    lines = [line["custom_id"] for b in sim.batch.batches.values() for line in b.lines]
    assert sorted(lines) == sorted(set(lines)) and len(lines) == 2, "a request went into two batches"
    gateway.read = threading.Barrier(1)  # one driver from here on
    _until_ended(drivers[0])
    answered = [c for b in sim.batch.batches.values() for c in b.done]
    assert sorted(answered) == sorted(lines)
    with recording() as calls:
        assert all(_ask(gateway, store, "r3", i).text for i in range(2)) and calls == []
    assert claims.lapsed(keys.batch_claims(store.uri, "r3"), 0) == []  # let go once taken in


# A driver in a process of its own that stops (and waits there to be killed) right after it
# uploaded its batch file ("upload") or made its batch ("create"), before it recorded it.
_KILLED_DRIVER = """
import sys
import redis
from prism.llm import Gateway
from prism.llm.endpoints import Endpoint, RetryPolicy
from prism.llm.pricing import PriceTable
from workers.batches import BatchClaims, BatchDriver, BatchLimits
from workers.cache import TieredCache
from workers.store import LocalStore

url, root, redis_url, stop = sys.argv[1:]


class Stopping(Gateway):
    def upload_batch(self, stage, data, name):
        return self._stop("upload", super().upload_batch(stage, data, name))

    def create_batch(self, stage, file_id, metadata):
        return self._stop("create", super().create_batch(stage, file_id, metadata))

    def _stop(self, where, made):
        if where == stop:
            print(where, flush=True)
            sys.stdin.read()
        return made


store = LocalStore(root)
cache = TieredCache(None, store, 3600, 3600)
gateway = Stopping(Endpoint(base_url=url, api_key="x"), PriceTable.load(), RetryPolicy(), cache=cache)
claims = BatchClaims(redis.Redis.from_url(redis_url))
BatchDriver(store, "r4", gateway, BatchLimits(gather_s=0), claims=claims).tick()
"""


def _killed_driver(sim, store: LocalStore, redis_url: str, stop: str) -> None:
    """The driver's process, SIGKILLed where it stopped."""
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_DRIVER, sim.url, str(store.root), redis_url, stop],
        cwd=Path(__file__).resolve().parents[2],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == stop, child.stderr
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)


def test_a_driver_killed_after_making_its_batch_leaves_one_batch(tmp_path, sim, redis_url):
    """Killed with SIGKILL after the provider made its batch, before it was recorded: the next
    driver adopts that batch and opens none, even with its claims taken for lapsed at once."""
    store, gateway = _setup(tmp_path, sim)
    for i in range(2):
        with pytest.raises(AwaitingBatch):
            _ask(gateway, store, "r4", i)
    _killed_driver(sim, store, redis_url, "create")
    assert len(sim.batch.batches) == 1 and not list(store.keys(RunLayout("r4").batch("batches")))
    claims = _claims("fleet", redis_url)
    driver = BatchDriver(store, "r4", gateway, BatchLimits(gather_s=0, claim_lease_s=0), claims=claims)
    _until_ended(driver)
    (made,) = sim.batch.batches.values()
    assert list(driver.records) == [made.id] and sorted(made.done) == sorted(line["custom_id"] for line in made.lines)
    assert len(made.done) == 2 and claims.lapsed(keys.batch_claims(store.uri, "r4"), 0) == []


def test_a_driver_killed_before_making_its_batch_leaves_its_requests_to_one_later_batch(tmp_path, sim, redis_url):
    """Killed with SIGKILL between taking its requests and making their batch: they are no
    other driver's while the claim's lease runs (the killed one could still have been making it),
    then they go into one batch."""
    store, gateway = _setup(tmp_path, sim)
    for i in range(2):
        with pytest.raises(AwaitingBatch):
            _ask(gateway, store, "r4", i)
    _killed_driver(sim, store, redis_url, "upload")
    claims = _claims("fleet", redis_url)
    BatchDriver(store, "r4", gateway, BatchLimits(gather_s=0), claims=claims).tick()
    assert sim.batch.batches == {} and len(list(store.keys(RunLayout("r4").batch("pending")))) == 2
    driver = BatchDriver(store, "r4", gateway, BatchLimits(gather_s=0, claim_lease_s=0), claims=claims)
    _until_ended(driver)
    (made,) = sim.batch.batches.values()
    assert len(made.lines) == len(made.done) == 2
    assert claims.lapsed(keys.batch_claims(store.uri, "r4"), 0) == []


@pytest.mark.parametrize("kind", ["fleet", "process"])
def test_a_claim_is_taken_once_and_one_renewed_since_a_sweep_read_it_is_kept(redis_url, kind):
    claims, name = _claims(kind, redis_url), f"prism:test:claims:{kind}:{time.time_ns()}"
    every = -1  # a lease every claim is past
    assert claims.claim(name, "a", ["x", "y"]) == {"x", "y"}
    assert claims.claim(name, "b", ["y", "z"]) == {"z"}  # y is a's
    assert not claims.renew(name, "b", ["y", "z"]) and claims.renew(name, "a", ["x", "y"])
    seen = dict(claims.lapsed(name, every))["y"]  # as a sweep reads it
    while dict(claims.lapsed(name, every))["y"] == seen:  # renewed: stamped a millisecond on at least
        assert claims.renew(name, "a", ["y"])
    claims.release(name, [("y", seen), ("z", "a")])  # the claim as read before, and the wrong token
    assert sorted(r for r, _ in claims.lapsed(name, every)) == ["x", "y", "z"]
    claims.release(name, [("x", "a"), ("y", "a"), ("z", "b")])
    assert claims.lapsed(name, every) == []
