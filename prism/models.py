"""The domain's data: what a ranking job takes in and what it gives back."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import to_json

from prism import names
from prism.names import ChunkRankerName, DocRankerName, Task
from prism.options import CompareMode, RunOptions, meta, option

# An LLM step. Each may use its own model and endpoint: the five filing types, one segment of
# a filing, the pool of segment winners, embeddings, or the evidence-selection roles.
Stage = Literal["documents", "segments", "rerank", "embeddings", "evidence"]
STAGES: tuple[Stage, ...] = get_args(Stage)
DEFAULT_MODEL = "gpt-5-mini"  # every LLM stage's model unless PRISM_LLM_MODEL or PRISM_LLM_MODELS says otherwise
DEFAULT_EMBEDDER = "hashed"  # $0 and offline
# repaired: the reply needed fixing; retried: a second request was needed; fallback: the
# lexical ranker answered instead; truncated: a chunk was cut to fit the budget; degraded: some
# segments failed for good and the ranking comes from the others.
Flag = Literal["repaired", "retried", "fallback", "truncated", "degraded"]

FILING_TYPES = ("DEF14A", "10-K", "10-Q", "8-K", "Earnings")
_FORMS = (
    (re.compile(r"^(10-?k|10-?k ?annual ?report|annual ?report)$"), "10-K"),
    (re.compile(r"^10-?q$"), "10-Q"),
    (re.compile(r"^8-?k$"), "8-K"),
    (re.compile(r"^def ?-?14a|proxy( statement)?$"), "DEF14A"),
    (re.compile(r"^(earnings|earnings call|earnings call transcript|transcript)$"), "Earnings"),
)


def form_type(value: str) -> str:
    """The filing type in prism.models.FILING_TYPES spelling when it is one of them, else as given."""
    lowered = value.strip().lower().replace("_", " ")
    for pattern, form in _FORMS:
        if pattern.match(lowered) or pattern.match(lowered.replace(" ", "")):
            return form
    return value.strip()


# Output caps per stage, in tokens. A ranking is a short list of indices (5 for documents, ten
# or so per segment); the agent roles answer in JSON with a line of reasoning per candidate.
# Caps keep a model that ignores the output contract from generating up to its context.
OUTPUT_CAPS: dict[Stage, int] = {"documents": 512, "segments": 1024, "rerank": 1024, "evidence": 4096, "embeddings": 0}
AGENT_OUTPUT_CAP = 4096
# A reasoning model's hidden reasoning counts against the same cap: this much more room.
REASONING_TOKENS = 8192
REASONING_MODELS = re.compile(r"(^|/)(o[1-9]|gpt-5(?!-chat))", re.IGNORECASE)


class Query(BaseModel):
    """One question and the candidates to rank, as read from one input row."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    task: Task
    question: str = Field(min_length=1)
    candidates: list[str] = Field(min_length=1)
    qrel: dict[int, int] | None = None
    answer: str | None = None  # a reference answer, where the data has one (FinanceBench)
    line: int = 0


class Usage(BaseModel):
    prompt_tokens: int = 0
    cached_tokens: int = 0  # part of prompt_tokens, billed at the cached rate
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # part of completion_tokens: the model's hidden reasoning

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class CallRecord(BaseModel):
    """One LLM request, as finally answered (or given up on) after its retries."""

    stage: Stage
    model: str
    usage: Usage = Usage()
    latency_s: float  # wall time of the whole call, retries and waits included
    attempts: int
    throttled: int = 0  # of the attempts, those the provider refused with 429
    usd: Decimal | None  # None: unknown (no price for the model, or a timed-out request); never read as $0
    error: str | None = None
    timeouts: int = 0  # attempts that timed out: the provider may have generated, and billed, them
    # the prompt tokens those attempts sent (as counted here): work the provider may have billed,
    # in no usage it reported
    timed_out_prompt_tokens: int = 0
    prompt_token_gap: int | None = None  # prompt tokens the server did not count (far fewer than sent)
    cached: bool = False  # answered from the response cache: no request, no tokens, $0
    tier: str = "standard"  # the service tier that answered: standard, flex or batch
    input_usd: Decimal | None = None  # the prompt side of usd (cached tokens at their rate)
    # What the levers saved on this call: cached tokens against the full input rate, and the
    # tier against standard prices.
    cache_saved_usd: Decimal = Decimal(0)
    tier_saved_usd: Decimal = Decimal(0)
    # A response-cache answer: what its first call's usage costs at this call's tier.
    response_cache_saved_usd: Decimal = Decimal(0)


class PromptCheck(BaseModel):
    """Whether an endpoint's model reads the system prompt: the same user message sent with and
    without it, compared by the server's own prompt-token counts (so its tokenizer does not matter)."""

    endpoint: str
    model: str
    stages: list[Stage]
    system_tokens: int  # the system prompt, as counted here
    counted_with: int | None = None  # the server's prompt tokens with the system prompt
    counted_without: int | None = None  # ... and without it
    dropped: bool | None = None  # None: not checked (see error)
    error: str | None = None
    checked_at: datetime | None = None  # kept for a day (producer.prompt_check.KEPT)

    def text(self) -> str:
        where = f"{self.model} at {self.endpoint} ({', '.join(self.stages)})"
        if self.dropped is None:
            return f"system prompt not checked for {where}: {self.error}"
        when = f" ({self.checked_at:%Y-%m-%d %H:%M} UTC)" if self.checked_at else ""
        counts = (
            f"it counted {self.counted_with} prompt tokens with the system prompt and {self.counted_without} "
            f"without{when}"
        )
        if self.dropped:
            return (
                f"the server DROPS THE SYSTEM PROMPT for {where}: {counts}, where the system prompt is "
                f"about {self.system_tokens}; its rankings follow the user message alone"
            )
        return f"system prompt read by {where}: {counts}"


class Ranking(BaseModel):
    """Candidate indices, best first, with what had to be done to get them."""

    indices: list[int]
    scores: list[float] | None = None
    flags: list[Flag] = []
    notes: list[str] = []
    answered_by: str | None = None  # in a cascade: "prior" or "llm"
    details: dict = {}  # what a strategy adds: sub-questions, evidence, an answer
    # who ordered it: "llm", "llm-repaired", "fallback:lexical", "financial", "prior"; segments
    # ranked by different ones: "llm+fallback:lexical"
    ranker: str | None = None

    def flagged(self, *flags: Flag, note: str | None = None) -> Ranking:
        merged = list(dict.fromkeys([*self.flags, *flags]))
        notes = [*self.notes, note] if note else self.notes
        return self.model_copy(update={"flags": merged, "notes": notes})


class Ranker(Protocol):
    """Orders candidates for a question: what every ranker (lexical, prior, LLM, strategies) is."""

    name: str

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking: ...


class RunConfig(RunOptions):
    """Everything that decides a ranking: the run's options, with the ones set as "auto" or by
    reference resolved. It travels with every job; what changes a result is in its fingerprint."""

    doc_ranker: DocRankerName = option("lexical", "the document ranker, resolved", changes="ranking")
    chunk_ranker: ChunkRankerName = option("lexical", "the chunk ranker, resolved", changes="ranking")
    models: dict[Stage, str] = option(
        {s: DEFAULT_EMBEDDER if s == "embeddings" else DEFAULT_MODEL for s in STAGES},
        "the model of each stage",
        changes="ranking",
    )
    # Per-stage output caps over the defaults (OUTPUT_CAPS); 0: no cap. One number: every stage.
    max_output_tokens: dict[Stage, int] = option({}, "output caps in force, per stage", changes="ranking")
    prior: str | None = option(None, 'the document prior model: "<uri>#<sha256>"', changes="ranking")
    fuse_weights: tuple[float, float] = option(
        (1.0, 1.0), "prior and LLM weights of the fuse ranker", changes="ranking"
    )
    icl: dict[Task, int] = option({}, "in-context examples per task (absent: none)", changes="ranking")
    icl_index: str | None = option(None, 'the example store: "<uri>#<sha256>"', changes="ranking")

    @field_validator("max_output_tokens", mode="before")
    @classmethod
    def _caps(cls, value):
        if value is None:  # runs recorded before caps were per stage
            return {}
        if isinstance(value, int) and not isinstance(value, bool):
            return dict.fromkeys(OUTPUT_CAPS, value)
        return value

    @field_validator("max_output_tokens")
    @classmethod
    def _caps_not_negative(cls, value: dict[Stage, int]) -> dict[Stage, int]:
        if bad := {s: n for s, n in value.items() if n < 0}:
            raise ValueError(f"output caps must be 0 (no cap) or more tokens, not {bad}")
        return value

    def expected_outputs(self, expected: int) -> dict[Stage, int]:
        """Output tokens an estimate expects per request, by stage: ``expected``, at most the cap."""
        return {s: min(expected, self.output_cap(s) or expected) for s in self.models}

    def output_cap(self, stage: Stage) -> int | None:
        """The stage's output cap: the one set, else the default for its answer, with room for
        reasoning on a reasoning model; None: no cap."""
        if stage in self.max_output_tokens:
            return self.max_output_tokens[stage] or None
        agents = self.ranker_for("documents" if stage == "documents" else "chunks") in (
            "agents",
            "a1",
            "a2",
            "a3",
            "a4",
        )
        cap = AGENT_OUTPUT_CAP if agents and stage != "embeddings" else OUTPUT_CAPS[stage]
        if cap and REASONING_MODELS.search(self.models.get(stage, "")):
            cap += REASONING_TOKENS
        return cap or None

    @property
    def segment_budget(self) -> int | None:
        """The tokens of one segment: the LLM's budget; None (the whole filing in one segment)
        for a $0 ranker, which has no context to fill and whose statistics (BM25's, LSA's, the
        standardised signals) are meant to be the whole filing's (evidence NDCG@5 0.571 cut
        into 32K-token segments, 0.609 whole, on bench/corpus.py)."""
        return self.segment_tokens if self.uses_llm("chunks") else None

    def fingerprint(self) -> str:
        """What decides each job's result: the same for the same ranking."""
        return self._digest("ranking")

    def plan_fingerprint(self) -> str:
        """What decides a question's result: its ranking, and which filings it is ranked in."""
        return self._digest("ranking", "plan")

    def _digest(self, *kinds: str) -> str:
        """The fields that change a result of these kinds with their values: the first ones always,
        in their first order, and those added since only where set, so a default configuration
        keeps the job ids it always had."""
        values, fields = self.model_dump(mode="json"), type(self).model_fields
        later = [
            name
            for name, field in fields.items()
            if meta(field)["changes"] in kinds
            and name not in FIRST_FINGERPRINT
            and getattr(self, name) != field.get_default(call_default_factory=True)
        ]
        body = {name: values[name] for name in (*FIRST_FINGERPRINT, *later)}
        return hashlib.sha256(to_json(body)).hexdigest()[:16]

    def ranker_for(self, task: Task) -> str:
        return self.doc_ranker if task == "documents" else self.chunk_ranker

    def uses_llm(self, task: Task) -> bool:
        return names.uses_llm(task, self.ranker_for(task))

    def paid_stages(self) -> set[Stage]:
        """The stages whose model is called through the gateway (and so must have a price)."""
        stages: set[Stage] = set()
        if self.uses_llm("documents"):
            stages.add("documents")
        if self.chunk_ranker == "evidence":
            stages.add("evidence")
        elif self.uses_llm("chunks"):
            stages |= {"segments", "rerank"}
        local = names.LOCAL_SCORERS
        if (any(self.icl.values()) and self.models["embeddings"] not in local) or self.dense not in local:
            stages.add("embeddings")
        return stages


# The fields of the first fingerprint, in their order (see RunConfig._digest).
FIRST_FINGERPRINT = (
    "doc_ranker",
    "chunk_ranker",
    "doc_prompt",
    "chunk_prompt",
    "prompt_layout",
    "models",
    "max_output_tokens",
    "top_n",
    "segment_top_k",
    "segment_tokens",
    "prior",
    "cascade_threshold",
    "fuse_weights",
    "icl",
    "icl_index",
    "prefilter_keep",
    "prefilter_share",
    "dense",
    "evidence_rounds",
    "evidence_strictness",
    "evidence_focus",
    "evidence_granularity",
)


def job_id(query: Query, config: RunConfig) -> str:
    """Content hash of the query and the config: same input, same config, same id."""
    body = json.dumps([query.task, query.question, query.candidates, config.fingerprint()], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


class SegmentOutcome(BaseModel):
    """The winners of one segment (global chunk indices), or why there are none."""

    level: int
    segment: int
    started_at: datetime | None = None
    indices: list[int] = []
    scores: list[float] | None = None  # the ranker's, for its winners, when it scores (the $0 rankers)
    flags: list[Flag] = []
    notes: list[str] = []
    calls: list[CallRecord] = []
    error: str | None = None
    budget_exhausted: bool = False  # stopped by the run's budget: the query stays pending
    details: dict = {}
    ranker: str | None = None  # who ranked it (Ranking.ranker)


class Cited(BaseModel):
    """Where a ranked chunk of a corpus filing is, and the passage of it that answers: written by
    the worker that ranked it (it has the filing in hand), read by the evidence table."""

    chunk_id: str
    page: int | None = None
    printed_page: str | None = None
    document: str | None = None
    section: int | None = None
    heading: str | None = None
    excerpt: str
    # Where the excerpt is: its offsets in the page's text (Filing.page_texts), or in the chunk's own
    # text for a chunk without a page; None in results from before they were kept.
    start: int | None = None
    end: int | None = None


class JobResult(BaseModel):
    run_id: str
    reused_from: str | None = None  # copied from an earlier run with the same job id: nothing spent
    job_id: str
    query_id: str
    task: Task
    ranker: str
    n_candidates: int
    ranking: Ranking
    calls: list[CallRecord] = []
    segments: int = 1
    levels: int = 1
    started_at: datetime
    finished_at: datetime
    cited: list[Cited] = []  # a corpus pair's ranked chunks, in ranking order (empty: not recorded)

    @property
    def uncited(self) -> bool:
        """Ranked before results carried their citations: to be cited again from the filing."""
        return len(self.cited) != len(self.ranking.indices)


class PlannedPair(BaseModel):
    """A (question, filing) pair a question's planning chose, and what became of it."""

    query_id: str
    filing: str
    version: str
    filing_rank: int
    filing_score: float
    reason: str = ""
    state: Literal["enqueued", "done", "reused", "pending"]
    segments: int = 0  # first-level segments enqueued
    since: str | None = None  # reused from this run
    reused: str | None = None  # the key of the result it reuses there (its outcome, by reference)
    lost: str | None = None  # a result an index named for it that was gone: ranked again
    # With a comparison: on a chosen filing's pair, the earlier filing it is compared with (None
    # when the company has none: its reason says so); on a pair ranked only as that earlier
    # filing, the chosen filing it is the earlier one of.
    previous: str | None = None
    previous_of: str | None = None


class Considered(BaseModel):
    """A filing in a question's scope as planning scored it: its score's parts, and whether it
    was one of those ranked."""

    filing: str
    score: float
    period_fit: float
    form_score: float
    recency: float
    ranked: bool


class QuestionPlan(BaseModel):
    """What planning made of one question of a set: its forms, period and filings, the pairs
    ranked for it, and, for a `--new` run, how it stands against the earlier run."""

    question_id: str
    question: str
    line: int
    source: str = ""
    scope: dict
    qrels: list[dict] = []
    answer: str | None = None
    period: str = ""
    forms_ranked_by: str = ""
    documents: Literal["done", "reused"] | None = None  # the question's document job, when it had one
    pairs: list[PlannedPair] = []
    considered: list[Considered] = []  # the best filings in its scope, scored
    pool: str = ""  # digest of the filings (and versions) in its scope: what `--new` compares
    compare: CompareMode | None = None  # its chosen filings are compared with earlier ones (pairs' previous)
    since: Literal["unchanged", "new_question", "changed_question", "changed_filings", "lost_result"] | None = None
    error: str | None = None  # what ended it in planning (no filing in scope, an error)

    @property
    def outcomes(self) -> int:
        """The outcomes it waits for: its document job's, then each pair's, or its own."""
        return (self.documents is not None) + (len(self.pairs) or 1)


class Reference(BaseModel):
    """A job's outcome that is an earlier run's result, named, not copied: nothing was spent."""

    run_id: str
    task: Task
    query_id: str
    result: str  # the key of that result
    since: str  # the run that stored it


class Failure(BaseModel):
    """A query that got no result, and why. Input errors name the line and the field; a query
    stopped by the run's budget is "skipped": pending, not failed."""

    run_id: str
    kind: Literal["input", "job", "skipped"]
    error: str
    query_id: str | None = None
    task: Task | None = None
    line: int | None = None
    source: str | None = None
    field: str | None = None
    calls: list[CallRecord] = []  # spent before it failed: still paid for


class Spent(BaseModel):
    """Calls that no result or failure holds: a job delivered twice, whose second result was
    refused because the first was already stored; a pre-filter's; the run's own (task None)."""

    run_id: str
    task: Task | None
    query_id: str
    reason: str
    calls: list[CallRecord]


# What `prism run` and `prism resume` exit with, by the run's status, so a scheduler knows the
# night; and what each status means, said where a run is shown.
EXIT_CODES = {
    "complete": 0,
    "failed": 1,
    "complete_with_failures": 3,
    "budget_exhausted": 4,
    "incomplete": 5,
    "interrupted": 6,
}
STATUS_MEANING = {
    "planning": "the producer is planning the run",
    "running": "its jobs are on the fleet",
    "complete": "every job has a result",
    "complete_with_failures": "every job ended; some failed, or some input lines were invalid",
    "failed": "no query got a result, or planning failed",
    "budget_exhausted": "the budget stopped jobs: `prism resume RUN_ID --budget-usd X` goes on",
    "incomplete": "jobs were still pending when the wait ended",
    "interrupted": "the producer stopped before the end: `prism resume RUN_ID` goes on",
}


class RunManifest(BaseModel):
    run_id: str
    # planning -> running -> complete | complete_with_failures (some jobs or input lines failed) |
    # incomplete | budget_exhausted | failed (planning failed, or every query did); interrupted: its
    # producer died before the run could end. The exit code of each: EXIT_CODES.
    status: Literal[
        "planning",
        "running",
        "complete",
        "complete_with_failures",
        "incomplete",
        "budget_exhausted",
        "failed",
        "interrupted",
    ]
    error: str | None = None  # why the run failed or was interrupted
    owner: str | None = None  # "host:pid" of the producer planning (or, embedded, running) it
    input: str  # rows, or a question set when ``corpus`` is set
    corpus: str | None = None  # the corpus a question set runs over
    corpus_version: int | None = None  # the catalogue version it was planned against (workers/catalog.py)
    corpus_versions: dict[str, int] = {}  # each table planning reads at its version then: a resume plans there too
    corpus_at: datetime | None = None  # the time of the catalogue's newest row then: `--new` counts the rows after it
    since: str | None = None  # a `--new` run: the last run over the corpus it starts from
    changes: dict = {}  # a `--new` run: filings and questions new or changed since then
    results: str
    created_at: datetime
    finished_at: datetime | None = None
    config: RunConfig  # every option of the run (budget, limit and how requests are sent among them)
    settings: dict  # secrets masked
    code_version: str
    embedded: bool
    reuse: bool = True  # copy results of earlier runs with the same job id
    requeues: int = 0  # times missing jobs were enqueued again after the fleet went quiet
    counts: dict[str, int] = {}  # documents, chunks, invalid_rows, done, failed, pending
    prompt_checks: list[PromptCheck] = []  # per endpoint and model, once when the run starts
    timings: dict[str, float] = {}  # plan_s, wall_s
    # Each adaptive "<endpoint> <model>": its in-flight limit over the run, [seconds from its start, limit]
    in_flight: dict[str, list[list[float]]] = {}

    @model_validator(mode="before")
    @classmethod
    def _options_in_config(cls, data: Any) -> Any:
        """A manifest written before every option was in the run's config: its budget, its way of
        sending and its filings per question moved there."""
        if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
            return data
        config = dict(data["config"])
        for name in ("budget_usd", "via"):
            if name in data and name not in config:
                config[name] = data[name]
        filings = (data.get("settings") or {}).get("filings_per_question")
        if filings is not None and "filings_per_question" not in config:
            config["filings_per_question"] = filings
        return {k: v for k, v in data.items() if k not in ("budget_usd", "via")} | {"config": config}
