"""The Batch API as another transport of the same chat requests: pure line building, file
packing and output parsing. The gateway (prism/llm.py) sends and fetches; the fleet
(workers/batches.py) keeps the pending requests and the batches in the run's store.

A line's ``custom_id`` is the request's response-cache key, so an answer lands in the cache
under the key the job will look up, and identical requests of a stage go out once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prism.models import Usage

URL = "/v1/chat/completions"
WINDOW = "24h"
MAX_LINES = 50_000  # per input file
MAX_BYTES = 200 * 1024 * 1024
TERMINAL = ("completed", "failed", "expired", "cancelled")
# Prompt caching applies inside batches for the gpt-5 family only.
BATCH_CACHING = re.compile(r"^gpt-5")


def line(custom_id: str, body: dict) -> bytes:
    """One input line: the request body exactly as the chat endpoint would get it."""
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": URL, "body": body}).encode() + b"\n"


def pack(
    lines: Iterable[tuple[str, bytes]], max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES
) -> list[list[tuple[str, bytes]]]:
    """(custom_id, line) pairs cut into input files of at most ``max_lines`` lines and
    ``max_bytes`` bytes each."""
    files: list[list[tuple[str, bytes]]] = []
    current: list[tuple[str, bytes]] = []
    size = 0
    for item in lines:
        if len(item[1]) > max_bytes:
            raise ValueError(f"a batch line of {len(item[1])} bytes is over the {max_bytes}-byte file limit")
        if current and (len(current) >= max_lines or size + len(item[1]) > max_bytes):
            files.append(current)
            current, size = [], 0
        current.append(item)
        size += len(item[1])
    if current:
        files.append(current)
    return files


@dataclass(frozen=True)
class LineResult:
    custom_id: str
    text: str | None = None  # the reply; None when the line failed
    usage: Usage | None = None
    error: str | None = None
    expired: bool = False


def read_lines(data: bytes, model: str) -> Iterator[LineResult]:
    """The lines of an output or error file (requests to ``model``), in any order, as answers or
    failures."""
    for raw in data.splitlines():
        if not raw.strip():
            continue
        row = json.loads(raw)
        custom_id = row["custom_id"]
        error = row.get("error")
        response = row.get("response") or {}
        body = response.get("body") or {}
        if error:
            code = error.get("code")
            yield LineResult(custom_id, error=f"{code}: {error.get('message')}", expired=code == "batch_expired")
        elif response.get("status_code") != 200 or not body.get("choices"):
            message = (body.get("error") or {}).get("message") or "no reply"
            yield LineResult(custom_id, error=f"HTTP {response.get('status_code')}: {message}")
        else:
            text = body["choices"][0].get("message", {}).get("content") or ""
            yield LineResult(custom_id, text=text, usage=usage(model, body.get("usage")))


def usage(model: str, raw: dict | None) -> Usage | None:
    """A line's usage as the chat endpoint reports it; cached tokens count only for models
    whose batches are cached (the rest pay the batch input rate for every prompt token)."""
    if not raw:
        return None
    cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(
        prompt_tokens=raw.get("prompt_tokens") or 0,
        cached_tokens=cached if BATCH_CACHING.match(model) else 0,
        completion_tokens=raw.get("completion_tokens") or 0,
        reasoning_tokens=(raw.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0,
    )
