"""What a self-hosted OpenAI-compatible server says of itself, asked over HTTP in each server's
own words: its slots, its context, the most requests it takes, where it reports its queue.

Asked in this order, the first that answers for its kind giving the facts:

1. llama.cpp's C++ server, ``GET /props``: ``total_slots`` (requests computed at once) and
   ``default_generation_settings.n_ctx``;
2. TGI, ``GET /info``: ``max_concurrent_requests`` (beyond it TGI answers 429, so a ceiling) and
   ``max_input_tokens`` (``max_input_length`` before TGI 2);
3. vLLM, ``GET /v1/models``: the model's ``max_model_len``; its ``/metrics``, where
   ``vllm:num_requests_waiting`` says whether requests queue;
4. LiteLLM's proxy, ``GET /model/info``: the named model's ``model_info.max_input_tokens``;
5. Ollama, ``POST /api/show``: ``num_ctx`` among its ``parameters`` (the context it serves, not
   the trained one in ``model_info``).

The base URL is the OpenAI one, usually ending in ``/v1``; the servers' own endpoints are at its
root. A server that does not answer at all (refused, timed out) is asked nothing more; one that
answers none of these yields ``ServerFacts()``.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

from prism.llm.endpoints import ServerFacts

WAITING = re.compile(r"^vllm:num_requests_waiting(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


class _Unreachable(Exception):
    """The server answered nothing: no point asking it anything else."""


class _Server:
    def __init__(self, base_url: str, timeout_s: float):
        self.base = base_url.rstrip("/")
        self.root = re.sub(r"/v1$", "", self.base)
        self.timeout_s = timeout_s

    def read(self, url: str, body: dict | None = None) -> bytes | None:
        """The reply's bytes; None where the server answered with an error (it is not that kind)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:  # noqa: S310 - the configured server
                return reply.read()
        except urllib.error.HTTPError:
            return None
        except (OSError, ValueError) as err:  # refused, timed out, reset: nobody there
            raise _Unreachable(str(err)) from err

    def json(self, url: str, body: dict | None = None) -> dict | None:
        raw = self.read(url, body)
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


def server_facts(base_url: str, model: str, timeout_s: float = 5.0) -> ServerFacts:
    """What the server at ``base_url`` says of itself and of ``model``; ServerFacts() where it
    says nothing."""
    server = _Server(base_url, timeout_s)
    try:
        for ask in (_llamacpp, _tgi, _vllm, _litellm, _ollama):
            if (facts := ask(server, model)) is not None:
                return facts
    except _Unreachable:
        pass
    return ServerFacts()


def queue_waiting(metrics_url: str, timeout_s: float = 1.0) -> int | None:
    """The requests a vLLM server reports waiting now, read from its /metrics; None where it
    does not answer."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout_s) as reply:  # noqa: S310 - the configured server
            return waiting_requests(reply.read().decode(errors="replace"))
    except (OSError, ValueError):
        return None


def waiting_requests(metrics: str) -> int | None:
    """The requests vLLM reports waiting, from its /metrics text (summed over its models)."""
    found = WAITING.findall(metrics)
    return round(sum(float(n) for n in found)) if found else None


def _positive(value) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _llamacpp(server: _Server, model: str) -> ServerFacts | None:
    props = server.json(f"{server.root}/props")
    if props is None:
        return None
    settings = props.get("default_generation_settings") or {}
    slots = _positive(props.get("total_slots"))
    context = _positive(settings.get("n_ctx") if isinstance(settings, dict) else None) or _positive(props.get("n_ctx"))
    if not (slots or context):
        return None
    sources = [("slots", "/props total_slots")] if slots else []
    sources += [("context", "/props n_ctx")] if context else []
    return ServerFacts(slots, context, "/props", sources=tuple(sources))


def _tgi(server: _Server, model: str) -> ServerFacts | None:
    info = server.json(f"{server.root}/info")
    if info is None:
        return None
    enforced = _positive(info.get("max_concurrent_requests"))
    field = "max_input_tokens" if "max_input_tokens" in info else "max_input_length"
    context = _positive(info.get(field))
    if not (enforced or context):
        return None
    sources = [("enforced_slots", "/info max_concurrent_requests")] if enforced else []
    sources += [("context", f"/info {field}")] if context else []
    return ServerFacts(None, context, "/info", enforced_slots=enforced, sources=tuple(sources))


def _vllm(server: _Server, model: str) -> ServerFacts | None:
    listing = server.json(f"{server.base}/models")
    models = [m for m in (listing or {}).get("data") or [] if isinstance(m, dict) and _positive(m.get("max_model_len"))]
    if not models:
        return None
    named = [m for m in models if m.get("id") == model]
    context = min(int(m["max_model_len"]) for m in named or models)
    sources = [("context", "/v1/models max_model_len")]
    metrics_url: str | None = f"{server.root}/metrics"
    metrics = server.read(f"{server.root}/metrics")
    if metrics is not None and waiting_requests(metrics.decode(errors="replace")) is not None:
        sources.append(("queue_metric_url", "/metrics vllm:num_requests_waiting"))
    else:
        metrics_url = None
    return ServerFacts(None, context, "/v1/models max_model_len", queue_metric_url=metrics_url, sources=tuple(sources))


def _litellm(server: _Server, model: str) -> ServerFacts | None:
    info = server.json(f"{server.root}/model/info")
    entries = [e for e in (info or {}).get("data") or [] if isinstance(e, dict) and e.get("model_name") == model]
    for entry in entries:
        details = entry.get("model_info") or {}
        if isinstance(details, dict) and (context := _positive(details.get("max_input_tokens"))):
            return ServerFacts(None, context, "/model/info", sources=(("context", "/model/info max_input_tokens"),))
    return None


def _ollama(server: _Server, model: str) -> ServerFacts | None:
    shown = server.json(f"{server.root}/api/show", {"model": model})
    parameters = (shown or {}).get("parameters")
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and (context := _positive(_number(value.strip()))):
            return ServerFacts(None, context, "/api/show num_ctx", sources=(("context", "/api/show num_ctx"),))
    return None


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None
