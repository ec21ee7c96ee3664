"""Output caps: on by default per stage, room for reasoning models, and sent in the field the
endpoint reads."""

import pytest
from pydantic import ValidationError

from prism.llm.endpoints import Endpoint
from prism.models import OUTPUT_CAPS, REASONING_TOKENS, RunConfig
from workers.settings import Settings


@pytest.mark.parametrize(
    "endpoint, fields",
    [
        (Endpoint(), {"max_completion_tokens": 300}),
        (Endpoint(base_url="https://api.openai.com/v1"), {"max_completion_tokens": 300}),
        (Endpoint(base_url="https://acme.openai.azure.com", provider="azure"), {"max_completion_tokens": 300}),
        (Endpoint(base_url="http://127.0.0.1:8080/v1"), {"max_tokens": 300}),
        (
            Endpoint(base_url="http://gpu-box:8000/v1", output_cap_param="both"),
            {"max_tokens": 300, "max_completion_tokens": 300},
        ),
        (Endpoint(output_cap_param="max_tokens"), {"max_tokens": 300}),
    ],
)
def test_the_cap_goes_in_the_field_the_endpoint_reads(endpoint, fields):
    assert endpoint.cap_fields(300) == fields
    assert endpoint.cap_fields(None) == {}


def test_caps_are_on_by_default_with_room_for_reasoning():
    models = RunConfig().models
    local = RunConfig(
        doc_ranker="llm", chunk_ranker="llm", models=models | {"documents": "qwen2.5-0.5b", "segments": "llama-3"}
    )
    assert local.output_cap("documents") == OUTPUT_CAPS["documents"] <= 512
    assert local.output_cap("segments") == OUTPUT_CAPS["segments"]
    reasoning = RunConfig(doc_ranker="llm", models=models | {"documents": "gpt-5-mini", "rerank": "o4-mini"})
    assert reasoning.output_cap("documents") == OUTPUT_CAPS["documents"] + REASONING_TOKENS
    assert reasoning.output_cap("rerank") == OUTPUT_CAPS["rerank"] + REASONING_TOKENS
    chat = RunConfig(models=models | {"documents": "gpt-5-chat-latest"})
    assert chat.output_cap("documents") == OUTPUT_CAPS["documents"]
    agents = RunConfig(chunk_ranker="a2", models=models | {"segments": "llama-3"})
    assert agents.output_cap("segments") > OUTPUT_CAPS["segments"]  # JSON with a reason per chunk
    assert RunConfig().output_cap("embeddings") is None


def test_caps_set_for_all_stages_or_one_and_zero_is_no_cap():
    assert RunConfig(max_output_tokens=300).output_cap("rerank") == 300
    one = RunConfig(max_output_tokens={"segments": 0})
    assert one.output_cap("segments") is None and one.output_cap("documents") is not None
    assert RunConfig(max_output_tokens=None).max_output_tokens == {}  # a run recorded before per-stage caps
    with pytest.raises(ValidationError, match="0 \\(no cap\\) or more"):
        RunConfig(max_output_tokens={"documents": -5})


def test_settings_write_the_caps_in_force_into_the_run_config(monkeypatch):
    monkeypatch.setenv("PRISM_LLM_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("PRISM_LLM_MODEL", "local-base")
    monkeypatch.setenv("PRISM_LLM_MAX_OUTPUT_TOKENS", '{"segments": 2048}')
    monkeypatch.setenv("PRISM_LLM_OUTPUT_CAP_PARAM", "both")
    monkeypatch.setenv("PRISM_LLM_TIMEOUT_RETRIES", "2")
    settings = Settings(doc_ranker="llm")
    config = settings.run_config()
    assert config.max_output_tokens == {
        "documents": OUTPUT_CAPS["documents"],
        "rerank": OUTPUT_CAPS["rerank"],
        "segments": 2048,
    }
    assert settings.endpoints()["segments"].output_cap_param == "both"
    assert settings.retry_policy().timeout_retries == 2
    monkeypatch.setenv("PRISM_LLM_MAX_OUTPUT_TOKENS", "300")
    assert set(Settings(doc_ranker="llm").run_config().max_output_tokens.values()) == {300}
    monkeypatch.setenv("PRISM_LLM_OUTPUT_CAP_PARAM", "max_length")
    with pytest.raises(ValidationError, match="llm_output_cap_param"):
        Settings()
