"""The Batch API transport's pure parts: lines, file packing, output parsing, batch prices."""

import json
from decimal import Decimal

import pytest

from prism.llm import batch
from prism.llm.pricing import PriceTable
from prism.models import Usage


def test_a_line_carries_the_chat_request_body_unchanged():
    body = {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "rank"}], "max_completion_tokens": 9}
    row = json.loads(batch.line("k1", body))
    assert row == {"custom_id": "k1", "method": "POST", "url": "/v1/chat/completions", "body": body}


def test_files_are_cut_by_lines_and_by_bytes():
    lines = [(f"k{i}", b"x" * 9 + b"\n") for i in range(7)]  # 10 bytes each
    assert [len(f) for f in batch.pack(lines, max_lines=3)] == [3, 3, 1]
    assert [len(f) for f in batch.pack(lines, max_bytes=25)] == [2, 2, 2, 1]
    assert [k for f in batch.pack(lines, max_lines=3) for k, _ in f] == [k for k, _ in lines]
    with pytest.raises(ValueError, match="over the 5-byte file limit"):
        batch.pack(lines, max_bytes=5)


def _ok(custom_id: str, text: str, cached: int = 0) -> dict:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    body = {"choices": [{"message": {"content": text}}], "usage": usage}
    return {"custom_id": custom_id, "response": {"status_code": 200, "body": body}, "error": None}


def test_output_and_error_lines_are_read_as_answers_and_failures():
    rows = [
        _ok("a", "[1, 0]", cached=64),
        {"custom_id": "b", "response": None, "error": {"code": "batch_expired", "message": "too late"}},
        {"custom_id": "c", "response": {"status_code": 500, "body": {"error": {"message": "boom"}}}, "error": None},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    got = {r.custom_id: r for r in batch.read_lines(data, "gpt-5-mini")}
    assert got["a"].text == "[1, 0]" and got["a"].usage == Usage(
        prompt_tokens=100, cached_tokens=64, completion_tokens=7, reasoning_tokens=5
    )
    assert got["b"].text is None and got["b"].expired and "batch_expired" in (got["b"].error or "")
    assert got["c"].text is None and not got["c"].expired and got["c"].error == "HTTP 500: boom"


def test_cached_tokens_count_in_batches_of_the_gpt5_family_only():
    data = json.dumps(_ok("a", "[0]", cached=64)).encode()
    (gpt41,) = batch.read_lines(data, "gpt-4.1")
    (gpt5,) = batch.read_lines(data, "gpt-5")
    assert gpt41.usage is not None and gpt41.usage.cached_tokens == 0
    assert gpt5.usage is not None and gpt5.usage.cached_tokens == 64


def test_batch_prices_are_half_of_standard_input_cached_and_output():
    table = PriceTable.load()
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=400_000, completion_tokens=100_000)
    standard, half = table.usd("gpt-5-mini", usage), table.usd("gpt-5-mini", usage, "batch")
    assert standard is not None and half == standard / 2
    assert half == (Decimal("0.25") * Decimal("0.6") + Decimal("0.025") * Decimal("0.4") + Decimal("0.2")) / 2
    prompt_side, completion_side = table.split("gpt-5-mini", usage, "batch") or (None, None)
    assert completion_side == Decimal("0.1") and prompt_side == half - Decimal("0.1")
