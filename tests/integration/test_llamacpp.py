"""An optional lane against a second real server: llama.cpp's OpenAI-compatible server
(llama-cpp-python), with a small GGUF model. Not part of `make test` (pyproject's addopts
deselect it); run it where llama-cpp-python is installed (building it takes minutes):

    pip install 'llama-cpp-python[server]'
    PRISM_LLAMACPP_MODEL=/path/to/model.gguf .venv/bin/pytest -m llamacpp tests/integration/test_llamacpp.py

A base model that ignores the output contract is the case this lane is for: every query must
still be ranked by the LLM or by the flagged fallback, within minutes, and its cost unknown.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.test_servers import assert_ranked_by_llm_or_flagged_fallback, small_run
from workers.testing import fleet_env

pytestmark = pytest.mark.llamacpp
CONTEXT = int(os.environ.get("PRISM_LLAMACPP_CTX", "4096"))


@pytest.fixture(scope="module")
def llamacpp_server(tmp_path_factory):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("this lane needs llama-cpp-python: pip install 'llama-cpp-python[server]'")
    model = os.environ.get("PRISM_LLAMACPP_MODEL")
    if not model or not Path(model).is_file():
        pytest.fail(f"PRISM_LLAMACPP_MODEL must name a GGUF model file (it is {model!r})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--n_ctx", str(CONTEXT)]
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
