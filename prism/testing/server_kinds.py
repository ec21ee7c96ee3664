"""What each kind of self-hosted server says of itself, in its own shape, for the provider
simulator to answer as that kind (``SimulatorConfig.server_kind``):

- llama.cpp's C++ server: ``GET /props``, ``total_slots`` and ``default_generation_settings.n_ctx``;
- vLLM: ``GET /v1/models`` with ``max_model_len``, and ``GET /metrics`` (Prometheus text) with
  ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``;
- TGI: ``GET /info`` with ``max_concurrent_requests`` (beyond which it answers 429 "Model is
  overloaded") and ``max_input_tokens``;
- Ollama: ``POST /api/show`` with ``parameters``, its Modelfile's PARAMETER lines as "name value"
  text: ``num_ctx`` is the context it serves, usually less than the trained one in
  ``model_info``;
- LiteLLM's proxy: ``GET /model/info``, each model's ``model_info.max_input_tokens``.
"""

from __future__ import annotations

import time

SERVER_KINDS = ("llamacpp", "vllm", "tgi", "ollama", "litellm")
MODEL_ID = "simulator"  # the model each kind says it serves
TGI_OVERLOADED = {"error": "Model is overloaded", "error_type": "overloaded"}
TGI_MAX_CONCURRENT = 128  # TGI's default, where no slots are configured


def llamacpp_props(slots: int, context: int | None) -> dict:
    return {"total_slots": slots, "default_generation_settings": {"n_ctx": context}}


def vllm_models(context: int | None) -> dict:
    model = {"id": MODEL_ID, "object": "model", "created": int(time.time()), "owned_by": "vllm", "root": MODEL_ID}
    if context:
        model["max_model_len"] = context
    return {"object": "list", "data": [model]}


def vllm_metrics(running: int, waiting: int) -> str:
    label = f'{{model_name="{MODEL_ID}"}}'
    return (
        "# HELP vllm:num_requests_running Number of requests currently running on GPU.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{label} {float(running)}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{label} {float(waiting)}\n"
    )


def tgi_info(max_concurrent: int, context: int | None) -> dict:
    info: dict = {
        "model_id": MODEL_ID,
        "model_dtype": "torch.float16",
        "model_device_type": "cuda",
        "max_concurrent_requests": max_concurrent,
        "max_best_of": 2,
        "max_stop_sequences": 4,
        "validation_workers": 2,
        "router": "text-generation-router",
    }
    if context:
        info |= {"max_input_tokens": context - 1, "max_total_tokens": context}
    return info


def ollama_show(model: str, context: int | None) -> dict:
    lines = ['stop                           "<|im_end|>"', "temperature                    0.2"]
    if context:
        lines.insert(0, f"num_ctx                        {context}")
    return {
        "modelfile": f"FROM {model}\n" + "".join(f"PARAMETER {' '.join(line.split())}\n" for line in lines),
        "parameters": "\n".join(lines),
        "template": "{{ .Prompt }}",
        "details": {"format": "gguf", "family": "llama", "parameter_size": "135M", "quantization_level": "Q8_0"},
        # What the model was trained with: more than Ollama serves unless num_ctx says so.
        "model_info": {"general.architecture": "llama", "llama.context_length": 8 * (context or 4096)},
    }


def litellm_model_info(context: int | None) -> dict:
    info = {"max_input_tokens": context, "max_output_tokens": 4096, "mode": "chat"} if context else {"mode": "chat"}
    return {"data": [{"model_name": MODEL_ID, "litellm_params": {"model": f"openai/{MODEL_ID}"}, "model_info": info}]}
