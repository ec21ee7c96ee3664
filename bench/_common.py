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


def load(path: Path, limit: int | None = None):
    from prism.datasets import read_queries
    from prism.models import Query

    out = []
    with open(path, "rb") as stream:
        for q in read_queries(stream):
            if isinstance(q, Query):
                out.append(q)
                if limit and len(out) >= limit:
                    break
    return out


def redis_db(db: int = 12) -> str:
    """A clean Redis DB for the benchmark; Redis must answer on 127.0.0.1:6379."""
    url = f"redis://127.0.0.1:6379/{db}"
    client = redis.Redis.from_url(url)
    client.ping()
    client.flushdb()
    return url


def report(**figures) -> None:
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()), flush=True)
