"""All configuration in one object: ``PRISM_*`` environment variables, or a TOML file named by
``PRISM_CONFIG``. Unset, everything runs embedded: in-process workers, results in ./results,
and the $0 lexical ranker."""

from __future__ import annotations

import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from prism.llm import Endpoint, RetryPolicy
from prism.models import PromptVariant, RunConfig, Stage
from workers.limiter import ModelLimits

STAGES: tuple[Stage, ...] = ("documents", "segments", "rerank", "embeddings", "evidence")


class EndpointOverride(BaseModel):
    """Another endpoint for one stage (say, a bigger model on another server for segments)."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    provider: Literal["openai", "azure"] | None = None
    api_version: str | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PRISM_", extra="ignore", populate_by_name=True)

    # where things run
    broker_url: str | None = None  # unset: embedded, in-process workers
    result_backend: str | None = None  # chord bookkeeping; defaults to the broker
    results: str = "results"  # a folder, or s3://bucket/prefix
    s3_endpoint_url: str | None = None  # an S3-compatible server; unset: AWS
    s3_region: str | None = None

    # the LLM
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = Field(None, validation_alias=AliasChoices("PRISM_LLM_API_KEY", "OPENAI_API_KEY"))
    llm_provider: Literal["openai", "azure"] = "openai"
    llm_api_version: str | None = None
    llm_model: str = "gpt-5-mini"
    llm_models: dict[Stage, str] = {}  # per-stage models, e.g. {"segments": "gpt-5"}
    embedder: str = "hashed"  # hashed ($0, offline), minilm ([local] extra), or an embeddings model name
    llm_endpoints: dict[Stage, EndpointOverride] = {}  # per-stage endpoints
    llm_timeout_s: float = 120.0
    llm_max_attempts: int = 6
    llm_backoff_cap_s: float = 60.0
    llm_max_output_tokens: int | None = None
    llm_expected_output_tokens: int = 1000  # reserved against tokens/min per request when no max is set
    prices_file: Path | None = None  # local price overrides on top of the bundled table

    # shared state: the fleet limiter, the hot cache, run budgets, metrics
    redis_url: str | None = None  # default: the broker, when it is Redis
    llm_limits: dict[
        str, ModelLimits
    ] = {}  # per model ("*" for any): {"gpt-5": {"requests": "500/minute", "tokens": "2000000/minute"}}
    limiter_max_block_s: float = 5.0  # longer waits give the worker slot back (the task comes back later)
    limiter_headroom: float = (
        0.98  # use this share of each limit: the shared counters approximate the provider's exact window
    )
    cache: bool = True  # answer identical LLM requests from the response cache
    cache_uri: str | None = None  # durable cache: a folder or s3://...; default: the results store
    cache_ttl_s: int = 90 * 24 * 3600
    cache_hot_ttl_s: int = 24 * 3600
    budget_usd: Decimal | None = None  # per run; the run stops at this spend
    stall_s: float = 120.0  # no progress, no queued or running task for this long: re-enqueue what is missing
    max_requeues: int = 3

    # the method
    doc_ranker: Literal["auto", "llm", "lexical", "prior", "cascade", "fuse", "agents"] = (
        "auto"  # auto: cascade with an LLM, else prior
    )
    doc_prior: str | None = None  # the prior model (a folder or s3:// prefix); default: the one shipped
    cascade_threshold: float | None = None  # default: the model's own (set for a share of queries when fitted)
    chunk_ranker: Literal["auto", "llm", "lexical", "hybrid", "financial", "a1", "a2", "a3", "a4", "evidence"] = "auto"
    doc_prompt: PromptVariant = "p4"
    chunk_prompt: PromptVariant = "p4"
    icl_documents: int = 0  # in-context examples per document prompt (the method: 5, 10 or 15)
    icl_chunks: int = 0
    icl_index: str | None = None  # the example store (prism icl build); a folder or s3:// prefix
    prefilter_keep: int | None = None  # keep this many chunks per filing by the scorer below
    # financial: the fused financial-page retriever alone ($0); else BM25 fused with this dense
    # half: lsa (per filing, $0), or an embedder (hashed, minilm, a model)
    dense: str = "financial"
    evidence_rounds: int = 3
    evidence_strictness: Literal["strict", "lenient"] = "strict"
    evidence_focus: Literal["focus_gaps", "focus_support"] = "focus_gaps"
    evidence_granularity: Literal["granularity_coarse", "granularity_fine"] = "granularity_coarse"
    top_n: int = 5
    segment_top_k: int = 10
    segment_tokens: int = 32_000

    # the fleet
    embedded_workers: int = 2
    visibility_timeout_s: int = 4 * 3600  # above the longest job, retries and waits included
    task_time_limit_s: int = 3600
    log_level: str = "INFO"

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
        if path := os.environ.get("PRISM_CONFIG"):
            sources += (TomlConfigSettingsSource(settings_cls, toml_file=path),)
        return sources

    @property
    def embedded(self) -> bool:
        return self.broker_url is None

    @property
    def shared_redis(self) -> str | None:
        if self.redis_url:
            return self.redis_url
        return self.broker_url if self.broker_url and self.broker_url.startswith(("redis://", "rediss://")) else None

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url or self.llm_api_key or self.llm_endpoints)

    def run_config(self, **overrides) -> RunConfig:
        llm = self.llm_configured
        doc_ranker = self.doc_ranker if self.doc_ranker != "auto" else ("cascade" if llm else "prior")
        chunk_ranker = self.chunk_ranker if self.chunk_ranker != "auto" else ("llm" if llm else "financial")
        fields = {
            "doc_ranker": doc_ranker,
            "chunk_ranker": chunk_ranker,
            "cascade_threshold": self.cascade_threshold,
            "doc_prompt": self.doc_prompt,
            "chunk_prompt": self.chunk_prompt,
            "models": {
                s: self.llm_models.get(s, self.embedder if s == "embeddings" else self.llm_model) for s in STAGES
            },
            "max_output_tokens": self.llm_max_output_tokens,
            "top_n": self.top_n,
            "segment_top_k": self.segment_top_k,
            "segment_tokens": self.segment_tokens,
            "icl": {t: k for t, k in (("documents", self.icl_documents), ("chunks", self.icl_chunks)) if k},
            "prefilter_keep": self.prefilter_keep,
            "dense": self.dense,
            "evidence_rounds": self.evidence_rounds,
            "evidence_strictness": self.evidence_strictness,
            "evidence_focus": self.evidence_focus,
            "evidence_granularity": self.evidence_granularity,
        }
        fields |= {k: v for k, v in overrides.items() if v is not None}
        if fields["chunk_ranker"] == "evidence" and not fields["prefilter_keep"]:
            fields["prefilter_keep"] = 20  # the rounds read every candidate: narrow a filing first
        return RunConfig(**fields)

    def endpoints(self) -> dict[Stage, Endpoint]:
        base = Endpoint(
            base_url=self.llm_base_url,
            provider=self.llm_provider,
            api_version=self.llm_api_version,
            api_key=self.llm_api_key.get_secret_value() if self.llm_api_key else None,
        )
        out = {}
        for stage in STAGES:
            o = self.llm_endpoints.get(stage)
            out[stage] = (
                base
                if o is None
                else Endpoint(
                    base_url=o.base_url or base.base_url,
                    provider=o.provider or base.provider,
                    api_key=o.api_key.get_secret_value() if o.api_key else base.api_key,
                    api_version=o.api_version or base.api_version,
                )
            )
        return out

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.llm_max_attempts,
            backoff_cap_s=self.llm_backoff_cap_s,
            timeout_s=self.llm_timeout_s,
            expected_output_tokens=self.llm_expected_output_tokens,
        )

    def masked(self) -> dict:
        """The settings as printed at start: secrets and URL passwords hidden."""
        return _mask_urls(self.model_dump(mode="json"))


def _mask_urls(value):
    if isinstance(value, dict):
        return {k: _mask_urls(v) for k, v in value.items()}
    if isinstance(value, str):
        return re.sub(r"(//[^:/@]*:)[^@/]+@", r"\1****@", value)
    return value
