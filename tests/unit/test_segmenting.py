import math
import random

from prism.segmenting import TokenCounter, plan_segments


def test_token_counts_are_exact_with_the_shipped_vocabulary():
    counter = TokenCounter()
    assert counter.exact
    # o200k_base: "hello world" is two tokens, " world" one.
    assert counter.count("hello world") == 2
    assert counter.count_many(["hello world", ""]) == [2, 0]
    long = "revenue grew " * 100
    assert counter.count(counter.truncate(long, 10)) == 10


def test_estimate_is_conservative_when_no_encoding():
    counter = TokenCounter("no_such_encoding")
    assert not counter.exact
    text = "Total revenue was $1,234 million in fiscal 2023, up 5% from the prior year."
    assert counter.count(text) >= TokenCounter().count(text)


def test_segments_cover_every_item_in_order_within_budget():
    rng = random.Random(7)
    for _ in range(500):
        costs = [rng.randint(1, 60) for _ in range(rng.randint(1, 80))]
        budget = rng.randint(60, 400)
        segments = plan_segments(range(len(costs)), costs, budget)
        assert [i for s in segments for i in s] == list(range(len(costs)))
        assert all(sum(costs[i] for i in s) <= budget for s in segments)
        assert len(segments) <= 2 * math.ceil(sum(costs) / budget)


def test_segments_are_even_not_greedy():
    assert plan_segments(range(10), [5] * 10, 20) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert plan_segments([4, 8, 9], {4: 3, 8: 3, 9: 3}, 100) == [[4, 8, 9]]


PROCESSES, THREADS = 4, 8


def _load_at_once(cache_dir: str) -> list[str]:
    """In a fresh process: THREADS threads load the encoding at the same moment; what each got."""
    import os
    import threading

    os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir
    start, got = threading.Barrier(THREADS), []

    def load() -> None:
        start.wait()
        try:
            counter = TokenCounter()
            got.append("exact" if counter.exact and counter.count("hello world") == 2 else "estimate")
        except Exception as err:  # noqa: BLE001 - reported to the test, which names it
            got.append(f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=load) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_processes_and_threads_seed_an_empty_encoding_cache_at_once(tmp_path):
    """4 processes x 8 threads start on an empty cache folder and all load the encoding at once:
    each writes the seed under a name of its own and moves it into place, so every load is exact
    and the file is whole (a shared temporary name had one thread move another's half-written
    file, or find it gone)."""
    import hashlib
    import multiprocessing

    from prism.segmenting import _ENCODING_URLS, _quicktok_vocab

    cache_dir = tmp_path / "tiktoken"
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        got = [g for each in pool.map(_load_at_once, [str(cache_dir)] * PROCESSES) for g in each]
    assert got == ["exact"] * PROCESSES * THREADS, sorted(set(got))
    name = hashlib.sha1(_ENCODING_URLS["o200k_base"].encode()).hexdigest()
    assert [p.name for p in cache_dir.iterdir()] == [name]  # no temporary file left behind
    assert (cache_dir / name).read_bytes() == _quicktok_vocab("o200k_base")


def test_a_half_written_encoding_cache_is_seeded_again(tmp_path):
    """A cache file cut short (as an older version could leave one) is a miss, not an estimate:
    tiktoken drops it, the download fails (offline: no proxy answers), and it is seeded again."""
    import hashlib
    import os
    import subprocess
    import sys

    from prism.segmenting import _ENCODING_URLS, _quicktok_vocab

    whole = _quicktok_vocab("o200k_base")
    assert whole is not None
    cached = tmp_path / hashlib.sha1(_ENCODING_URLS["o200k_base"].encode()).hexdigest()
    cached.write_bytes(whole[: len(whole) // 2])
    env = os.environ | {"TIKTOKEN_CACHE_DIR": str(tmp_path), "HTTPS_PROXY": "http://127.0.0.1:9"}
    code = "from prism.segmenting import TokenCounter; print(TokenCounter().exact)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]
    assert cached.read_bytes() == whole
