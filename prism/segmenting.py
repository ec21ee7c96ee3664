"""Token counting and cutting chunk lists into segments that fit a token budget.

Counts are for budgets only; cost always comes from the provider's reported usage.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import struct
from collections.abc import Sequence
from functools import cache
from importlib.util import find_spec
from pathlib import Path

import tiktoken

from prism.files import atomic_write

# The tokens a candidate's marker ("[Chunk Index 123] ") and separator add to the prompt.
MARKER_TOKENS = 8
_ENCODING_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}
_QUICKTOK_FILES = {"o200k_base": "o200k.vocab", "cl100k_base": "cl100k.vocab"}


class TokenCounter:
    """Exact counts with tiktoken's encoding when it can be had; else a conservative estimate
    (one token per three characters, above the real count for English and financial text)."""

    def __init__(self, encoding: str = "o200k_base", threads: int = 2):
        self.encoding = _load_encoding(encoding)
        self.exact = self.encoding is not None
        self.threads = threads  # tiktoken's batch threads

    def count(self, text: str) -> int:
        if self.encoding is None:
            return math.ceil(len(text) / 3)
        return len(self.encoding.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if self.encoding is None:
            return [self.count(t) for t in texts]
        return [len(ids) for ids in self.encoding.encode_ordinary_batch(list(texts), num_threads=self.threads)]

    def encode(self, text: str) -> list[int]:
        """Token ids; without the encoding, one pseudo-token per three characters."""
        if self.encoding is None:
            return [hash(text[i : i + 3]) & 0xFFFFFFFF for i in range(0, len(text), 3)]
        return self.encoding.encode_ordinary(text)

    def truncate(self, text: str, tokens: int) -> str:
        if self.encoding is None:
            return text[: tokens * 3]
        return self.encoding.decode(self.encoding.encode_ordinary(text)[:tokens])


@cache
def _load_encoding(name: str) -> tiktoken.Encoding | None:
    """tiktoken's own loader, first seeding its cache from the vocab file that the quicktok-v1
    package ships (tiktoken cannot download it offline). tiktoken checks the file's sha256."""
    cache_dir = Path(
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "prism-fleet" / "tiktoken"))
    )
    url = _ENCODING_URLS.get(name)
    cached = cache_dir / hashlib.sha1(url.encode()).hexdigest() if url else None
    for _ in range(2):
        # Threads and processes seed it at once on an empty cache: each writes its own file.
        if cached is not None and not cached.exists() and (vocab := _quicktok_vocab(name)):
            atomic_write(cached, vocab)
        try:
            return tiktoken.get_encoding(name)
        except Exception:  # noqa: BLE001 - offline with nothing cached, or a bad cache file: estimate instead
            if cached is None or cached.exists():
                return None
            # tiktoken removed a bad file (a half-written one of an older version): seed it again
    return None


def _quicktok_vocab(name: str) -> bytes | None:
    """quicktok's vocab (u32 count; per token u16 length, bytes, u32 rank) in tiktoken's format."""
    spec = find_spec("quicktok")
    if spec is None or spec.origin is None or name not in _QUICKTOK_FILES:
        return None
    path = Path(spec.origin).parent / "data" / _QUICKTOK_FILES[name]
    if not path.exists():
        return None
    data = path.read_bytes()
    (count,), offset, ranks = struct.unpack_from("<I", data), 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, offset)
        token = data[offset + 2 : offset + 2 + length]
        (rank,) = struct.unpack_from("<I", data, offset + 2 + length)
        ranks.append((rank, token))
        offset += 2 + length + 4
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in sorted(ranks))


def plan_segments(items: Sequence[int], cost: Sequence[int] | dict[int, int], budget: int) -> list[list[int]]:
    """Cut ``items`` (in order) into runs whose costs fit ``budget``: about as few as the total
    allows, of even size, so no segment's ranking competes in a nearly empty field.

    ``cost[i]`` is item i's prompt tokens, marker included; an item over budget gets a segment
    of its own (callers truncate such items first).
    """
    total = sum(cost[i] for i in items)
    target = total / max(1, math.ceil(total / budget))  # even share of each segment
    segments: list[list[int]] = []
    current: list[int] = []
    used = done = 0
    for i in items:
        # Close the segment when the item would overflow it, or would sit mostly past the
        # segment's even share of the cumulative total.
        if current and (used + cost[i] > budget or done + used + cost[i] / 2 > (len(segments) + 1) * target):
            segments.append(current)
            done += used
            current, used = [], 0
        current.append(i)
        used += cost[i]
    if current:
        segments.append(current)
    return segments
