"""Shared by the benchmarks: the shared data, and a Redis DB of the benchmarks' own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("PRISM_SHARED_DATA", ROOT.parent / "shared" / "data"))
DOC_DEV = SHARED / "finagentbench" / "document_ranking_kaggle_dev.jsonl"
PAGES = SHARED / "financebench" / "financebench_page_ranking.jsonl.gz"

from prism.datasets import load_queries as load  # noqa: E402 - after the path is set


def redis_db(db: int = 12) -> str:
    """A clean Redis DB for the benchmark; Redis must answer on 127.0.0.1:6379."""
    url = f"redis://127.0.0.1:6379/{db}"
    client = redis.Redis.from_url(url)
    client.ping()
    client.flushdb()
    return url


def report(**figures) -> None:
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()), flush=True)
