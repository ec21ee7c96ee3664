"""The simulator's Files and Batch APIs through the openai SDK, as the batch driver uses them:
statuses over time, request counts, output and error files, cancellation, validation."""

from __future__ import annotations

import json
import time

import openai
import pytest

from prism.testing.batches import BatchConfig
from prism.testing.simulator import Simulator, SimulatorConfig

pytestmark = pytest.mark.integration


@pytest.fixture()
def sim():
    with Simulator(SimulatorConfig()) as s:
        s.batch.config = BatchConfig(validate_s=0.1, process_s=0.6, finalize_s=0.1, cancel_s=0.1)
        yield s


def _lines(n: int, model: str = "gpt-4.1") -> bytes:
    rows = []
    for i in range(n):
        content = f"Question: which filing?\n\n[0] the annual report {i}\n[1] the proxy statement {i}"
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        rows.append({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _submit(client: openai.OpenAI, data: bytes):
    file = client.files.create(file=("in.jsonl", data), purpose="batch")
    return client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"run": "t"}
    )


def _wait(client: openai.OpenAI, batch_id: str, seen: list[str] | None = None):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        b = client.batches.retrieve(batch_id)
        if seen is not None and (not seen or seen[-1] != b.status):
            seen.append(b.status)
        if b.status in ("completed", "failed", "expired", "cancelled"):
            return b
        time.sleep(0.05)
    raise AssertionError("the batch did not end")


def _read(client: openai.OpenAI, file_id: str | None) -> dict[str, dict]:
    if file_id is None:
        return {}
    return {r["custom_id"]: r for r in map(json.loads, client.files.content(file_id).text.splitlines())}


def test_a_batch_moves_through_its_statuses_and_answers_as_the_chat_endpoint(sim):
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0)
    data = _lines(6)
    created = _submit(client, data)
    assert created.status == "validating" and created.request_counts.total == 6
    statuses: list[str] = []
    done = _wait(client, created.id, statuses)
    assert statuses[0] == "validating" and statuses[-2:] == ["finalizing", "completed"] and "in_progress" in statuses
    assert done.request_counts.completed == 6 and done.request_counts.failed == 0 and done.error_file_id is None
    out = _read(client, done.output_file_id)
    assert sorted(out) == [f"c{i}" for i in range(6)]
    first = json.loads(data.splitlines()[0])["body"]
    online = client.chat.completions.create(**first)
    line = out["c0"]["response"]["body"]
    assert line["choices"][0]["message"]["content"] == online.choices[0].message.content
    assert online.usage is not None and line["usage"]["prompt_tokens"] == online.usage.prompt_tokens
    assert [b.id for b in client.batches.list(limit=5)] == [created.id]
    assert client.batches.retrieve(created.id).metadata == {"run": "t"}


def test_failed_and_expired_lines_go_to_the_error_file(sim):
    sim.batch.config.fail_rate, sim.batch.config.expire_rate = 0.3, 0.3
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0)
    done = _wait(client, _submit(client, _lines(30)).id)
    out, errors = _read(client, done.output_file_id), _read(client, done.error_file_id)
    codes = [e["error"]["code"] for e in errors.values()]
    assert done.status == "expired" and {"server_error", "batch_expired"} <= set(codes)
    assert sorted(out.keys() | errors.keys()) == sorted(f"c{i}" for i in range(30)) and not out.keys() & errors.keys()
    assert done.request_counts.completed == len(out) and done.request_counts.failed == len(errors)


def test_a_batch_whose_every_line_failed_completes_with_no_output_file(sim):
    sim.batch.config.fail_batches = 1
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0)
    done = _wait(client, _submit(client, _lines(4)).id)
    assert done.status == "completed" and done.output_file_id is None and done.request_counts.failed == 4
    assert len(_read(client, done.error_file_id)) == 4
    again = _wait(client, _submit(client, _lines(4)).id)  # only the next batch was told to fail
    assert again.request_counts.completed == 4


def test_a_batch_cancelled_mid_run_keeps_the_lines_done_so_far(sim):
    sim.batch.config.process_s = 2.0
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0)
    created = _submit(client, _lines(20))
    while client.batches.retrieve(created.id).request_counts.completed < 3:
        time.sleep(0.05)
    assert client.batches.cancel(created.id).status == "cancelling"
    done = _wait(client, created.id)
    out = _read(client, done.output_file_id)
    assert done.status == "cancelled" and 3 <= len(out) < 20 and done.request_counts.completed == len(out)


def test_a_file_with_two_models_or_too_many_lines_fails_validation(sim):
    sim.batch.config.max_lines = 5
    client = openai.OpenAI(base_url=sim.url, api_key="x", max_retries=0)
    mixed = _wait(client, _submit(client, _lines(2, "gpt-4.1") + _lines(1, "gpt-5")).id)
    assert mixed.status == "failed" and mixed.errors and mixed.errors.data[0].code == "mismatched_model"
    big = _wait(client, _submit(client, _lines(6)).id)
    assert big.status == "failed" and big.errors and big.errors.data[0].code == "too_many_requests"
