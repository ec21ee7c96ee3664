"""All configuration in one object: ``PRISM_*`` environment variables, or a TOML file named by
``PRISM_CONFIG``. Unset, everything runs embedded: in-process workers, results in ./results,
and the $0 lexical ranker."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import AliasChoices, BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from prism.ingest.models import CHUNK_TOKENS, CHUNK_TOKENS_RANGE, Chunking
from prism.llm.adaptive import UPPER_BOUND
from prism.llm.endpoints import FLEX_TIMEOUT_S, Endpoint, ModelLimits, OutputCapParam, RequestOptions, RetryPolicy
from prism.models import DEFAULT_EMBEDDER, DEFAULT_MODEL, STAGES, RunConfig, Stage
from prism.names import ChunkRankerSetting, DocRankerSetting, ReasoningEffort, ServiceTier
from prism.options import PLANNING, RunOptions, flag_of, option

FaultStage = Literal["ranker", "input", "aggregate", "store"]


class EndpointOverride(BaseModel):
    """Another endpoint for one stage (say, a bigger model on another server for segments)."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    provider: Literal["openai", "azure"] | None = None
    api_version: str | None = None
    output_cap_param: OutputCapParam | None = None


RESULTS_COMMANDS = ("run", "enqueue", "resume", "status", "report", "eval", "view", "runs", "prune")
SELECTING = ("ingest", "fetch")  # the commands that take a selection of filings


class Settings(BaseSettings, RunOptions):
    """Every setting, each declared once with its help (prism.options): the run options it
    inherits, and the fleet's own below."""

    # Unknown keys in the config file are errors: a misspelled option must not be ignored.
    model_config = SettingsConfigDict(env_prefix="PRISM_", extra="forbid", populate_by_name=True, frozen=False)

    # where things run
    broker_url: str | None = option(
        None, "the fleet's broker (redis://host:6379/0); unset: embedded, in-process workers"
    )
    result_backend: str | None = option(None, "chord bookkeeping; unset: the broker")
    results: str = option(
        "results", "where runs are written: a folder, or s3://bucket/prefix", commands=RESULTS_COMMANDS
    )
    s3_endpoint_url: str | None = option(None, "an S3-compatible server; unset: AWS")
    s3_region: str | None = option(None, "the S3 region")

    # the LLM
    llm_base_url: str | None = option(None, "any OpenAI-compatible server (http://host:8000/v1); unset: OpenAI")
    llm_api_key: SecretStr | None = option(
        None,
        "the API key (or OPENAI_API_KEY)",
        validation_alias=AliasChoices("PRISM_LLM_API_KEY", "OPENAI_API_KEY"),
    )
    llm_provider: Literal["openai", "azure"] = option("openai", "openai, or azure (with PRISM_LLM_API_VERSION)")
    llm_api_version: str | None = option(None, "Azure's API version")
    llm_model: str = option(DEFAULT_MODEL, "the model of every stage that PRISM_LLM_MODELS does not name")
    llm_models: dict[Stage, str] = option({}, 'per-stage models, JSON: {"segments": "gpt-5"}')
    embedder: str = option(
        DEFAULT_EMBEDDER, "hashed ($0, offline), minilm ([minilm] extra), wordllama, or an embeddings model"
    )
    llm_endpoints: dict[Stage, EndpointOverride] = option(
        {}, 'per-stage endpoints, JSON: {"segments": {"base_url": "...", "api_key": "..."}}'
    )
    llm_timeout_s: float | None = option(
        None, f"a request's timeout; unset: {RetryPolicy.timeout_s:g} s, {FLEX_TIMEOUT_S:g} s under flex", gt=0
    )
    llm_timeout_retries: int = option(
        RetryPolicy.timeout_retries, "re-sends of a timed-out request, apart from PRISM_LLM_MAX_ATTEMPTS", ge=0
    )
    llm_max_attempts: int = option(RetryPolicy.max_attempts, "attempts per request on 429 and 5xx", ge=1)
    # 30 min rides out a deploy, a restart or a regional blip, and still ends a night within its
    # window with the failures said.
    outage_s: float = option(
        RetryPolicy.outage_s,
        "how long jobs wait for an LLM endpoint that is down, since its first failure, before they fail",
        gt=0,
    )
    llm_backoff_cap_s: float = option(RetryPolicy.backoff_cap_s, "the longest wait between two attempts", ge=0)
    llm_max_output_tokens: int | dict[Stage, int] | None = option(
        None, 'output caps: one number for every stage or per stage ({"segments": 2048}); 0: none; unset: the defaults'
    )
    llm_output_cap_param: OutputCapParam = option(
        "auto", "the request field of the cap; auto: max_completion_tokens for OpenAI and Azure, max_tokens elsewhere"
    )
    llm_expected_output_tokens: int = option(
        RetryPolicy.expected_output_tokens,
        "output tokens reserved per request (limiter, budget, estimate) until its use is known; at most the cap",
        flag="--output-tokens",
        commands=("estimate",),
        ge=1,
    )
    prices_file: Path | None = option(None, "local price overrides (TOML) on top of the bundled table")
    service_tier: ServiceTier = option(
        RequestOptions.service_tier, "flex: batch prices on ordinary calls, slower, at times refused"
    )
    reasoning_effort: dict[Stage, ReasoningEffort] = option({}, "per stage; unset: the model's default")
    prompt_cache_key: bool = option(
        RequestOptions.prompt_cache_key, "send a key per (model, filing segment) so its prefix is cached together"
    )
    prompt_cache_rpm: int = option(15, "requests per minute per key: above it the provider spills", ge=1)

    # shared state: the fleet limiter, the hot cache, run budgets, metrics
    redis_url: str | None = option(None, "the limiter's, the hot cache's and the budgets' Redis; unset: the broker")
    llm_limits: dict[str, ModelLimits] = option(
        {}, 'per model ("*": any), JSON: {"gpt-5": {"requests": "500/minute", "tokens": "2000000/minute"}}'
    )
    llm_concurrency: dict[str, Annotated[int, Field(ge=0)]] = option(
        {},
        'requests in flight at once per model ("*": any), across the fleet, JSON: {"*": 4}; 0: no cap; '
        "unset: none for a hosted API; for a server a team runs, a limit that adapts to its capacity",
    )
    llm_max_in_flight: int = option(
        UPPER_BOUND, "the most requests in flight an adaptive limit grows to, per (endpoint, model)", ge=1
    )
    limiter_max_block_s: float = option(5.0, "the longest wait inside a task; longer ones give the worker back", ge=0)
    check_system_prompt: bool = option(
        True, "check when a run starts that each endpoint's model reads the system prompt"
    )
    limiter_headroom: float = option(0.98, "the share of each limit used", gt=0, le=1)
    cache: bool = option(True, "answer identical LLM requests from the response cache")
    cache_uri: str | None = option(None, "the durable response cache: a folder or s3://...; unset: the results store")
    cache_ttl_s: int = option(90 * 24 * 3600, "how long the durable cache keeps an answer", ge=1)
    cache_hot_ttl_s: int = option(24 * 3600, "how long Redis keeps an answer's hot copy", ge=1)
    batch_poll_s: float = option(30.0, "how often batches are polled and jobs look for their answers", gt=0)
    batch_gather_s: float = option(10.0, "how long waiting requests gather before a batch file goes", ge=0)
    batch_max_tries: int = option(3, "batches a request goes into before it is sent online", ge=1)
    batch_max_lines: int = option(50_000, "lines of one Batch API input file", ge=1, le=50_000)
    batch_max_mb: float = option(200.0, "MB of one Batch API input file", gt=0, le=200)
    ingest_checkpoint_s: float = option(
        30.0, "how often a long ingest appends what it has done to the corpus catalogue (a kill loses no more)", gt=0
    )
    stall_s: float = option(120.0, "no progress and nothing running this long: what is missing is enqueued again", gt=0)
    max_requeues: int = option(3, "times missing jobs are enqueued again before they are recorded lost", ge=0)

    # the method
    doc_ranker: DocRankerSetting = option(
        "auto",
        "the document ranker; auto: cascade with an LLM, else prior",
        commands=PLANNING,
    )
    doc_prior: str | None = option(None, "the prior model (a folder or s3:// prefix); unset: the one shipped")
    chunk_ranker: ChunkRankerSetting = option(
        "auto",
        "the chunk ranker; auto: llm with an LLM, else financial",
        commands=PLANNING,
    )
    icl_documents: int = option(
        0, "in-context examples per document prompt (the method: 5, 10 or 15)", commands=PLANNING, ge=0
    )
    icl_chunks: int = option(0, "in-context examples per chunk prompt", commands=PLANNING, ge=0)
    icl_index: str | None = option(None, "the example store (prism icl build): a folder or s3:// prefix")

    # EDGAR
    edgar_url: str = option(
        "https://www.sec.gov", "EDGAR's base URL: the viewer's links to filings, and where prism fetch reads (a mirror)"
    )
    sec_user_agent: str | None = option(
        None,
        "who is asking, as SEC's fair-access policy asks: a company name and an e-mail (Acme Data ops@acme.com); prism fetch needs it",
    )
    edgar_rps: float = option(
        10.0, "requests a second to EDGAR, counted across the whole fleet; SEC allows 10, never more", gt=0, le=10
    )
    edgar_pause_s: float = option(
        600.0,
        "how long fetches pause after EDGAR refuses for the rate (403 threshold page, 429, 503) before one tries again",
        gt=0,
    )
    # which filings a backfill or a fetch takes (prism.corpus.filters): all unset, every one
    forms: str | None = option(
        None,
        "the forms to take, comma-separated as EDGAR writes them (10-K,10-Q,8-K); exact: 10-K is not 10-K/A",
        commands=SELECTING,
    )
    ciks: str | None = option(
        None, "the companies to take: CIKs, comma-separated, or a file of them", commands=SELECTING
    )
    question_set: str | None = option(
        None, "take the companies that this question set's scopes name", commands=SELECTING
    )
    chunk_tokens: int = option(
        CHUNK_TOKENS,
        "chunk size of HTML and text filings, in tokens (part of a filing's version)",
        commands=SELECTING,
        ge=CHUNK_TOKENS_RANGE[0],
        le=CHUNK_TOKENS_RANGE[1],
    )

    evidence_prefilter: int = option(
        20,
        "chunks of a filing the evidence ranker keeps by the pre-filter when no pre-filter is set"
        " (its rounds read every candidate)",
        ge=1,
    )

    # the fleet
    embedded_workers: int = option(2, "worker threads of an embedded run", ge=1)
    visibility_timeout_s: int = option(
        4 * 3600, "broker redelivery: above the longest job, retries and waits included", ge=1
    )
    task_time_limit_s: int = option(3600, "the longest job", ge=120)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = option("INFO", "DEBUG, INFO, WARNING or ERROR")
    fault_at: FaultStage | None = option(None, "fault tests: every job raises at this stage")

    @field_validator("llm_max_output_tokens")
    @classmethod
    def _caps(cls, value: int | dict | None) -> int | dict | None:
        caps = value.values() if isinstance(value, dict) else [] if value is None else [value]
        if any(cap < 0 for cap in caps):
            raise ValueError("an output cap is 0 (no cap) or a positive number of tokens")
        return value

    @field_validator("sec_user_agent")
    @classmethod
    def _names_someone(cls, value: str | None) -> str | None:
        if value is not None and not re.search(r"\S+@\S+\.\w+", value):
            raise ValueError("give a company name and an e-mail address, as SEC asks: 'Acme Data ops@acme.com'")
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
    def command_log_level(self) -> str:
        """A command's: WARNING where the fleet is embedded, whose workers' lines would bury what
        the command itself prints."""
        return self.log_level if not self.embedded else "WARNING"

    @property
    def shared_redis(self) -> str | None:
        if self.redis_url:
            return self.redis_url
        return self.broker_url if self.broker_url and self.broker_url.startswith(("redis://", "rediss://")) else None

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url or self.llm_api_key or self.llm_endpoints)

    def run_config(self) -> RunConfig:
        """The run's options as set, with what is "auto" resolved and the caps in force written out."""
        llm = self.llm_configured
        doc_ranker = self.doc_ranker if self.doc_ranker != "auto" else ("cascade" if llm else "prior")
        chunk_ranker = self.chunk_ranker if self.chunk_ranker != "auto" else ("llm" if llm else "financial")
        fields: dict[str, Any] = {name: getattr(self, name) for name in RunOptions.model_fields}
        fields |= {
            "doc_ranker": doc_ranker,
            "chunk_ranker": chunk_ranker,
            "models": {
                s: self.llm_models.get(s, self.embedder if s == "embeddings" else self.llm_model) for s in STAGES
            },
            "max_output_tokens": self.llm_max_output_tokens,
            "icl": {t: k for t, k in (("documents", self.icl_documents), ("chunks", self.icl_chunks)) if k},
        }
        if chunk_ranker == "evidence" and not (self.prefilter_keep or self.prefilter_share):
            fields["prefilter_keep"] = self.evidence_prefilter
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

    def chunking(self) -> Chunking:
        return Chunking(chunk_tokens=self.chunk_tokens)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.llm_max_attempts,
            backoff_cap_s=self.llm_backoff_cap_s,
            timeout_s=self.llm_timeout_s or (FLEX_TIMEOUT_S if self.service_tier == "flex" else RetryPolicy.timeout_s),
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


def named(option: str, value: object = None) -> str:
    """How a message names an option: its variable, ``PRISM_X``, or ``PRISM_X=value``. An option
    Settings does not declare raises, so a renamed option cannot leave a message naming the old one."""
    if option not in Settings.model_fields:
        raise KeyError(f"no option {option!r}")
    return f"PRISM_{option.upper()}" + ("" if value is None else f"={value}")


def flag(option: str) -> str:
    """How a message names an option's command-line flag (``--via``)."""
    return flag_of(option, Settings.model_fields[option])


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
