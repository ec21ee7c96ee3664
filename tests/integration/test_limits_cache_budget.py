"""The fleet limiter, the response cache and run budgets against real Redis."""

import time
import uuid
from decimal import Decimal

import pytest
import redis

from prism.llm import BudgetExhausted, RateLimited
from prism.llm.endpoints import ModelLimits
from workers import keys
from workers.budget import RunBudget
from workers.cache import TieredCache
from workers.limiter import FleetLimiter
from workers.store import LocalStore

pytestmark = pytest.mark.integration


def limiter(redis_url, max_block_s=0.2, **limits):
    client = redis.Redis.from_url(redis_url) if redis_url else None
    return FleetLimiter(client, {"m": ModelLimits(**limits)}, max_block_s=max_block_s)


def test_two_processes_share_one_requests_window(redis_url):
    endpoint = uuid.uuid4().hex
    a, b = limiter(redis_url, requests="10/minute"), limiter(redis_url, requests="10/minute")
    for i in range(10):
        (a if i % 2 else b).acquire(endpoint, "m", 1)
    with pytest.raises(RateLimited) as err:
        a.acquire(endpoint, "m", 1)
    assert err.value.retry_in > 0.2
    other = uuid.uuid4().hex  # another endpoint has its own window
    b.acquire(other, "m", 1)


def test_tokens_are_reserved_then_settled_to_what_was_used(redis_url):
    endpoint = uuid.uuid4().hex
    a, b = limiter(redis_url, tokens="1000/minute"), limiter(redis_url, tokens="1000/minute")
    reservation = a.acquire(endpoint, "m", 600)
    with pytest.raises(RateLimited):
        b.acquire(endpoint, "m", 600)
    a.settle(reservation, used=200, headers={})  # 400 handed back
    b.acquire(endpoint, "m", 600)
    with pytest.raises(ValueError):  # one request above the whole limit can never pass
        b.acquire(endpoint, "m", 5000)


def test_the_provider_headers_win_when_they_say_less_is_left(redis_url):
    endpoint = uuid.uuid4().hex
    a = limiter(redis_url, requests="100/minute", tokens="100000/minute")
    reservation = a.acquire(endpoint, "m", 1000)
    a.settle(reservation, 1000, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-remaining-requests": "99"})
    with pytest.raises(RateLimited):
        a.acquire(endpoint, "m", 10)


@pytest.mark.parametrize("shared", [True, False], ids=["redis", "in-process"])
def test_a_window_frees_what_left_it_not_an_average_of_it(redis_url, shared):
    """Traffic late in one window is still counted early in the next, as a provider counts it:
    a sliding-window counter would spread it over the window and let requests through early."""
    endpoint = uuid.uuid4().hex
    a = limiter(redis_url if shared else None, max_block_s=0, tokens="1000/2 seconds")
    first = a.acquire(endpoint, "m", 100)
    time.sleep(1.5)
    a.acquire(endpoint, "m", 800)  # late in the first window
    time.sleep(0.6)  # the first entry has left; the second is 0.6 s old
    a.settle(first, 10, {})  # settling an entry that has left changes nothing
    a.acquire(endpoint, "m", 150)
    with pytest.raises(RateLimited) as err:  # 800 + 150 + 100 > 1000 until the 800 leaves
        a.acquire(endpoint, "m", 100)
    assert 1.0 < err.value.retry_in < 1.6
    late = a.acquire(endpoint, "m", 50)  # fits: 1000 exactly
    a.settle(late, 120, {})  # an overrun always lands on its own entry
    with pytest.raises(RateLimited):
        a.acquire(endpoint, "m", 1)


def test_rates_are_checked_when_settings_are_read():
    with pytest.raises(ValueError, match="not a rate"):
        ModelLimits(tokens="200k a minute")


def test_a_short_wait_blocks_instead_of_deferring(redis_url):
    endpoint = uuid.uuid4().hex
    a = limiter(redis_url, max_block_s=5, requests="2/2 seconds")
    started = time.monotonic()
    for _ in range(3):
        a.acquire(endpoint, "m", 1)
    assert 0.3 < time.monotonic() - started < 5
    assert a.waited_s > 0.3


def test_cache_answers_from_redis_then_from_the_store(redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    store = LocalStore(tmp_path)
    cache = TieredCache(client, store, hot_ttl_s=60, ttl_s=3600)
    key = uuid.uuid4().hex
    assert cache.get(key) is None
    cache.put(key, {"text": "[1, 0]"})
    assert cache.get(key)["text"] == "[1, 0]"
    client.delete(keys.cache(key))  # the hot copy expired: the durable one answers and warms it
    assert cache.get(key)["text"] == "[1, 0]" and client.exists(keys.cache(key))
    expired = TieredCache(None, store, hot_ttl_s=60, ttl_s=-1)
    expired.put(key, {"text": "old"})
    assert expired.get(key) is None


def test_budget_refuses_a_call_that_would_pass_the_cap(redis_url):
    client = redis.Redis.from_url(redis_url)
    budget = RunBudget(client, uuid.uuid4().hex, Decimal("0.010"))
    budget.reserve(Decimal("0.006"))
    with pytest.raises(BudgetExhausted):  # 0.006 in flight + 0.006 > 0.010
        budget.reserve(Decimal("0.006"))
    assert budget.exhausted()
    budget.settle(Decimal("0.006"), Decimal("0.003"))
    assert budget.spent() == Decimal("0.003")
    budget.reserve(Decimal("0.006"))  # 0.003 spent + 0.006 in flight fits
    budget.reopen()
    assert not budget.exhausted()


def test_a_prompt_key_is_warmed_by_one_request_before_the_others_go_then_paced(redis_url):
    client = redis.Redis.from_url(redis_url)

    def fleet_limiter() -> FleetLimiter:
        return FleetLimiter(client, {}, max_block_s=0.3, prompt_rpm=3)

    a, b = fleet_limiter(), fleet_limiter()  # two worker processes
    key, endpoint = f"prism-{uuid.uuid4().hex[:12]}", "e"
    warmup = a.acquire(endpoint, "m", 10, key)  # the warm-up
    with pytest.raises(RateLimited, match="warming"):
        b.acquire(endpoint, "m", 10, key)  # held by a: b steps aside
    a.settle(warmup, 0, {})  # refused: the claim is let go, the key not warm
    assert not client.exists(keys.prompt_warm(key)) and not client.exists(keys.prompt_warming(key))
    warmup = b.acquire(endpoint, "m", 10, key)  # b warms it now
    b.settle(warmup, 1200, {})
    assert client.exists(keys.prompt_warm(key))
    a.acquire(endpoint, "m", 10, key)  # warm: goes at once; the third request of the key this minute
    with pytest.raises(RateLimited, match="per-prompt rate"):
        b.acquire(endpoint, "m", 10, key)
    client.delete(keys.prompt_warm(key))
