"""All configuration in one object: ``PRISM_*`` environment variables, or a TOML file named by
``PRISM_CONFIG``. Unset, everything runs embedded: in-process workers, results in ./results,
and the $0 lexical ranker."""

from __future__ import annotations

import os
import re
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import AliasChoices, BaseModel, Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from prism.llm import FLEX_TIMEOUT_S, Endpoint, OutputCapParam, RequestOptions, RetryPolicy
from prism.models import RunConfig, Stage
from prism.registry import (
    ChunkRankerSetting,
    DocRankerSetting,
    PromptLayout,
    PromptVariant,
    ReasoningEffort,
    ServiceTier,
)
from workers.limiter import ModelLimits

STAGES: tuple[Stage, ...] = ("documents", "segments", "rerank", "embeddings", "evidence")
FaultStage = Literal["ranker", "input", "aggregate", "store"]


class EndpointOverride(BaseModel):
    """Another endpoint for one stage (say, a bigger model on another server for segments)."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    provider: Literal["openai", "azure"] | None = None
    api_version: str | None = None
    output_cap_param: OutputCapParam | None = None


class Settings(BaseSettings):
    # Unknown keys in the config file are errors: a misspelled option must not be ignored.
    model_config = SettingsConfigDict(env_prefix="PRISM_", extra="forbid", populate_by_name=True)

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
    embedder: str = "hashed"  # hashed ($0, offline), minilm ([minilm] extra), or an embeddings model name
    llm_endpoints: dict[Stage, EndpointOverride] = {}  # per-stage endpoints
    llm_timeout_s: float | None = Field(None, gt=0)  # default: 120 s, FLEX_TIMEOUT_S under flex
    llm_timeout_retries: int = Field(1, ge=0)  # re-sends of a timed-out request, apart from llm_max_attempts
    llm_max_attempts: int = Field(6, ge=1)
    # An endpoint down (no connection, 502/503/504/529) pauses the jobs that need it, for this long
    # at most since its first failure; then their calls fail. 30 min rides out a deploy, a restart or
    # a regional blip, and still ends a night within its window with the failures said.
    outage_s: float = Field(1800.0, gt=0)
    llm_backoff_cap_s: float = Field(60.0, ge=0)
    # Output caps: one number for every stage, or per stage ({"segments": 2048}); 0: no cap.
    # Unset stages take the defaults in prism.models.OUTPUT_CAPS (+ REASONING_TOKENS for reasoning models).
    llm_max_output_tokens: int | dict[Stage, int] | None = None
    llm_output_cap_param: OutputCapParam = "auto"  # the request field for the cap; auto: by provider and base_url
    # reserved per request (tokens/min, budget) until its use is known; at most the cap
    llm_expected_output_tokens: int = Field(1000, ge=1)
    prices_file: Path | None = None  # local price overrides on top of the bundled table
    # flex: batch prices on ordinary calls, slower, and at times refused (retried, not charged)
    service_tier: ServiceTier = "standard"
    reasoning_effort: dict[Stage, ReasoningEffort] = {}  # per stage; unset: not sent (the model's default)
    prompt_cache_key: bool = True  # send a key per (model, filing segment) so its prefix is cached together
    prompt_cache_rpm: int = Field(15, ge=1)  # requests per minute per key: above it the provider spills

    # shared state: the fleet limiter, the hot cache, run budgets, metrics
    redis_url: str | None = None  # default: the broker, when it is Redis
    # per model ("*" for any): {"gpt-5": {"requests": "500/minute", "tokens": "2000000/minute"}}
    llm_limits: dict[str, ModelLimits] = {}
    limiter_max_block_s: float = Field(5.0, ge=0)  # longer waits give the worker slot back
    # a run first checks that each endpoint's model reads the system prompt (producer.prompt_check)
    check_system_prompt: bool = True
    # the share of each limit used: the shared counters approximate the provider's exact window
    limiter_headroom: float = Field(0.98, gt=0, le=1)
    cache: bool = True  # answer identical LLM requests from the response cache
    cache_uri: str | None = None  # durable cache: a folder or s3://...; default: the results store
    cache_ttl_s: int = Field(90 * 24 * 3600, ge=1)
    cache_hot_ttl_s: int = Field(24 * 3600, ge=1)
    budget_usd: Decimal | None = Field(None, gt=0)  # per run; the run stops at this spend
    # --via batch: requests go in Batch API files at half price; jobs look for their answers
    # every batch_poll_s, the producer polls the batches as often and submits what has waited
    # batch_gather_s with nothing new joining; a request is sent online after batch_max_tries batches
    via: Literal["online", "batch"] = "online"
    batch_poll_s: float = Field(30.0, gt=0)
    batch_gather_s: float = Field(10.0, ge=0)
    batch_max_tries: int = Field(3, ge=1)
    batch_max_lines: int = Field(50_000, ge=1, le=50_000)
    batch_max_mb: float = Field(200.0, gt=0, le=200)
    stall_s: float = Field(120.0, gt=0)  # no progress and nothing running this long: re-enqueue what is missing
    max_requeues: int = Field(3, ge=0)

    # the method
    doc_ranker: DocRankerSetting = "auto"  # auto: cascade with an LLM, else prior
    doc_prior: str | None = None  # the prior model (a folder or s3:// prefix); default: the one shipped
    cascade_threshold: float | None = None  # default: the model's own (set for a share of queries when fitted)
    chunk_ranker: ChunkRankerSetting = "auto"  # auto: llm with an LLM, else lexical
    doc_prompt: PromptVariant = "p4"
    chunk_prompt: PromptVariant = "p4"
    prompt_layout: PromptLayout = "question_last"
    icl_documents: int = Field(0, ge=0)  # in-context examples per document prompt (the method: 5, 10 or 15)
    icl_chunks: int = Field(0, ge=0)
    icl_index: str | None = None  # the example store (prism icl build); a folder or s3:// prefix
    prefilter_keep: int | None = Field(None, ge=1)  # keep this many chunks per filing by the scorer below
    prefilter_share: float | None = Field(None, gt=0, lt=1)  # or the best that fit in this share of its tokens
    # financial: the fused financial-page retriever alone ($0); financial-minilm: with MiniLM; else BM25 fused with this dense
    # half: lsa (per filing, $0), or an embedder (hashed, minilm, a model)
    dense: str = "financial"
    evidence_rounds: int = Field(3, ge=1, le=5)
    evidence_strictness: Literal["strict", "lenient"] = "strict"
    evidence_focus: Literal["focus_gaps", "focus_support"] = "focus_gaps"
    evidence_granularity: Literal["granularity_coarse", "granularity_fine"] = "granularity_coarse"
    top_n: int = Field(5, ge=1)
    segment_top_k: int = Field(10, ge=1)
    segment_tokens: int = Field(32_000, ge=1_000)
    # the filings a question over a corpus is ranked in: the top F, or "auto" (prism.periods.AUTO_MARGIN)
    filings_per_question: Annotated[int, Field(ge=1, le=20)] | Literal["auto"] = "auto"

    # the fleet
    embedded_workers: int = Field(2, ge=1)
    visibility_timeout_s: int = Field(4 * 3600, ge=1)  # above the longest job, retries and waits included
    task_time_limit_s: int = Field(3600, ge=120)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    fault_at: FaultStage | None = None  # fault tests: every job raises at this stage

    @field_validator("filings_per_question", mode="before")
    @classmethod
    def _filings(cls, value: Any) -> Any:
        """One message for a bad value, not one per branch of the union."""
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 20):
            return value
        if isinstance(value, str) and value.isdigit() and 1 <= int(value) <= 20:
            return int(value)
        raise ValueError(f"expected a number of filings from 1 to 20, or auto; got {value!r}")

    @field_validator("llm_max_output_tokens")
    @classmethod
    def _caps(cls, value: int | dict | None) -> int | dict | None:
        caps = value.values() if isinstance(value, dict) else [] if value is None else [value]
        if any(cap < 0 for cap in caps):
            raise ValueError("an output cap is 0 (no cap) or a positive number of tokens")
        return value

    @field_validator("prefilter_share")
    @classmethod
    def _one_prefilter(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("prefilter_keep"):
            raise ValueError("PRISM_PREFILTER_KEEP is set too: the pre-filter keeps a count or a share, not both")
        return value

    @field_validator("results", "cache_uri", "doc_prior", "icl_index")
    @classmethod
    def _store_uri(cls, value: str | None) -> str | None:
        if value and value.startswith("s3://") and not urlparse(value).netloc:
            raise ValueError("an s3:// URI needs a bucket: s3://bucket/prefix")
        if value and not value.startswith("s3://") and Path(value).exists() and not Path(value).is_dir():
            raise ValueError("a file: a store is a folder (or s3://bucket/prefix)")
        return value

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
        if path := os.environ.get("PRISM_CONFIG"):
            if not Path(path).is_file():
                raise SettingsProblem(f"PRISM_CONFIG={path}: no such file")
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
            "prompt_layout": self.prompt_layout,
            "models": {
                s: self.llm_models.get(s, self.embedder if s == "embeddings" else self.llm_model) for s in STAGES
            },
            "max_output_tokens": self.llm_max_output_tokens,
            "top_n": self.top_n,
            "segment_top_k": self.segment_top_k,
            "segment_tokens": self.segment_tokens,
            "icl": {t: k for t, k in (("documents", self.icl_documents), ("chunks", self.icl_chunks)) if k},
            "prefilter_keep": self.prefilter_keep,
            "prefilter_share": self.prefilter_share,
            "dense": self.dense,
            "evidence_rounds": self.evidence_rounds,
            "evidence_strictness": self.evidence_strictness,
            "evidence_focus": self.evidence_focus,
            "evidence_granularity": self.evidence_granularity,
        }
        fields |= {k: v for k, v in overrides.items() if v is not None}
        if fields["chunk_ranker"] == "evidence" and not (fields["prefilter_keep"] or fields["prefilter_share"]):
            fields["prefilter_keep"] = 20  # the rounds read every candidate: narrow a filing first
        config = RunConfig(**fields)
        # The caps in force, written out, so the manifest shows them and a new default is a new job id.
        caps = {s: config.output_cap(s) or 0 for s in sorted(config.paid_stages() - {"embeddings"})}
        return config.model_copy(update={"max_output_tokens": caps})

    def endpoints(self) -> dict[Stage, Endpoint]:
        base = Endpoint(
            base_url=self.llm_base_url,
            provider=self.llm_provider,
            api_version=self.llm_api_version,
            api_key=self.llm_api_key.get_secret_value() if self.llm_api_key else None,
            output_cap_param=self.llm_output_cap_param,
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
                    output_cap_param=o.output_cap_param or base.output_cap_param,
                )
            )
        return out

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.llm_max_attempts,
            backoff_cap_s=self.llm_backoff_cap_s,
            timeout_s=self.llm_timeout_s or (FLEX_TIMEOUT_S if self.service_tier == "flex" else 120.0),
            timeout_retries=self.llm_timeout_retries,
            expected_output_tokens=self.llm_expected_output_tokens,
            outage_s=self.outage_s,
        )

    def request_options(self) -> RequestOptions:
        efforts: dict[str, str] = {str(k): str(v) for k, v in self.reasoning_effort.items()}
        return RequestOptions(self.service_tier, efforts, self.prompt_cache_key)

    def masked(self) -> dict:
        """The settings as printed at start: secrets and URL passwords hidden."""
        return _mask_urls(self.model_dump(mode="json"))


def _mask_urls(value):
    if isinstance(value, dict):
        return {k: _mask_urls(v) for k, v in value.items()}
    if isinstance(value, str):
        return re.sub(r"(//[^:/@]*:)[^@/]+@", r"\1****@", value)
    return value


class SettingsProblem(ValueError):
    """Bad settings, said in one line per problem, each naming the variable."""


def load_settings(**overrides) -> Settings:
    """The settings, or SettingsProblem naming each bad variable and what it allows."""
    try:
        return Settings(**overrides)
    except ValidationError as err:
        raise SettingsProblem("\n".join(_describe(e) for e in err.errors())) from None
    except tomllib.TOMLDecodeError as err:  # the file PRISM_CONFIG names is not TOML
        raise SettingsProblem(f"PRISM_CONFIG={os.environ.get('PRISM_CONFIG')}: not valid TOML: {err}") from None
    except SettingsError as err:  # a JSON value that does not parse
        field = re.search(r'field "(\w+)"', str(err))
        name = f"PRISM_{field.group(1).upper()}" if field else "a PRISM_* variable"
        cause = f": {err.__cause__}" if err.__cause__ else ""
        raise SettingsProblem(f"{name}: not valid JSON{cause}") from None


def _describe(error: Any) -> str:
    loc = [str(p) for p in error["loc"]]
    name = "PRISM_" + loc[0].upper() if loc else "settings"
    where = "".join(f"[{p}]" for p in loc[1:])
    value = error.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f"={value}"
    if error["type"] == "extra_forbidden":
        source = os.environ.get("PRISM_CONFIG", "the settings")
        return f"{source}: unknown key {loc[0]!r}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "literal_error":
        message = "must be one of " + error["ctx"]["expected"]
    return f"{name}{where}{shown}: {message}"
