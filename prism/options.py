"""How an option is declared, once: its type, bounds, default and help on one pydantic field, and
what follows from it in the field's metadata (the flag and the commands that take it, and
whether it changes a result). The ``PRISM_*`` variable, the TOML key, the CLI flags, the
configuration page, the manifest entry and the job fingerprint are all read from these fields.

:class:`RunOptions` holds the options a run carries with it (in every job's :class:`RunConfig`);
the fleet's other settings are declared the same way in ``workers/settings.py``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from prism.names import PromptLayout, PromptVariant

Command = str  # a command's name: run, enqueue, estimate, resume, status, ...
# ranking: changes every job's result (in the job ids); plan: changes which filings a question is
# ranked in (in a question's fingerprint, so `--new` sees it); None: changes how a run goes, not
# what it finds (concurrency, budget, limit, how requests are sent).
Changes = Literal["ranking", "plan"] | None
PLANNING: tuple[Command, ...] = ("run", "enqueue", "estimate")  # the commands that plan a run
SPENDING: tuple[Command, ...] = ("run", "enqueue", "resume")  # the commands that spend

FilingsPerQuestion = Annotated[int, Field(ge=1, le=20)] | Literal["auto"]
# The earlier filing a question's filings are compared with (prism/corpus/comparable.py): the one before
# (a 10-Q's quarter before, a first quarter's annual report), or the same period a year before.
CompareMode = Literal["previous", "year_ago"]


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    commands: tuple[Command, ...] = (),
    changes: Changes = None,
    **constraints: Any,
) -> Any:
    """A field that declares an option: ``flag`` defaults to the name with dashes, and is given
    to ``commands``; none: set by its variable or TOML key only."""
    extra = {"flag": flag, "commands": list(commands), "changes": changes}
    return Field(default, description=help, json_schema_extra=extra, **constraints)  # type: ignore[arg-type]


def meta(field: FieldInfo) -> dict[str, Any]:
    """What an option's declaration says beyond its type: flag, commands, changes."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    commands = extra.get("commands")
    return {
        "flag": extra.get("flag"),
        "commands": tuple(commands) if isinstance(commands, list) else (),
        "changes": extra.get("changes"),
    }


def flag_of(name: str, field: FieldInfo) -> str:
    return meta(field)["flag"] or "--" + name.replace("_", "-")


class RunOptions(BaseModel):
    """The options a run carries in every job, as set (the resolved ones are RunConfig's own)."""

    model_config = ConfigDict(frozen=True)

    doc_prompt: PromptVariant = option("p4", "prompt variant of document ranking", commands=PLANNING, changes="ranking")
    chunk_prompt: PromptVariant = option("p4", "prompt variant of chunk ranking", commands=PLANNING, changes="ranking")
    prompt_layout: PromptLayout = option(
        "question_last",
        "question_last puts the question after the filing, so questions over one filing share the "
        "provider's cached prefix; question_first is the method's own order",
        commands=PLANNING,
        changes="ranking",
    )
    top_n: int = option(5, "chunks in a final ranking", commands=PLANNING, changes="ranking", ge=1)
    segment_top_k: int = option(10, "winners each segment keeps for the pool", changes="ranking", ge=1)
    segment_tokens: int = option(
        32_000,
        "prompt tokens of one segment of a filing, for an LLM ranker (a $0 ranker reads a filing whole)",
        commands=PLANNING,
        changes="ranking",
        ge=1_000,
    )
    cascade_threshold: float | None = option(
        None,
        "the cascade's confidence below which the LLM ranks the forms; unset: the prior's own",
        changes="ranking",
    )
    prefilter_keep: int | None = option(
        None,
        "keep this many chunks of a filing by the pre-filter scorer before any LLM",
        flag="--prefilter",
        commands=PLANNING,
        changes="ranking",
        ge=1,
    )
    prefilter_share: float | None = option(
        None,
        "or keep the best chunks that fit in this share of a filing's tokens",
        commands=PLANNING,
        changes="ranking",
        gt=0,
        lt=1,
    )
    dense: str = option(
        "financial",
        "the pre-filter's and the hybrid ranker's scorer: financial, financial-minilm, or BM25 fused "
        "with lsa or an embedder (hashed, minilm, wordllama, an embeddings model)",
        changes="ranking",
    )
    evidence_rounds: int = option(3, "Selector/Adder rounds of the evidence ranker", changes="ranking", ge=1, le=5)
    evidence_strictness: Literal["strict", "lenient"] = option(
        "strict", "how sure the Selector must be", changes="ranking"
    )
    evidence_focus: Literal["focus_gaps", "focus_support"] = option(
        "focus_gaps", "what the Adder looks for", changes="ranking"
    )
    evidence_granularity: Literal["granularity_coarse", "granularity_fine"] = option(
        "granularity_coarse", "how finely the analyzer splits a question", changes="ranking"
    )
    filings_per_question: FilingsPerQuestion = option(
        "auto",
        "filings ranked per question: a number (1-20), or auto (the best and those scored close to it, three at most)",
        flag="--filings",
        commands=PLANNING,
        changes="plan",
    )
    compare: CompareMode | None = option(
        None,
        "rank each question in the company's earlier comparable filing too, and mark what changed in "
        "its evidence since then: previous (the filing before) or year_ago (the same period a year before)",
        commands=PLANNING,
        changes="plan",
    )
    via: Literal["online", "batch"] = option(
        "online",
        "batch: the LLM requests go in Batch API files at half price, answered within 24 h",
        commands=("run", "enqueue"),
    )
    budget_usd: Decimal | None = option(None, "stop the run at this spend (USD)", commands=SPENDING, gt=0)
    limit: int | None = option(None, "plan at most this many questions or rows", commands=PLANNING, ge=1)

    @field_validator("filings_per_question", mode="before")
    @classmethod
    def _filings(cls, value: Any) -> Any:
        """One message for a bad value, not one per branch of the union."""
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 20):
            return value
        if isinstance(value, str) and value.isdigit() and 1 <= int(value) <= 20:
            return int(value)
        raise ValueError(f"expected a number of filings from 1 to 20, or auto; got {value!r}")

    @field_validator("prefilter_share")
    @classmethod
    def _one_prefilter(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("prefilter_keep"):
            raise ValueError("PRISM_PREFILTER_KEEP is set too: the pre-filter keeps a count or a share, not both")
        return value

    @property
    def prefilters(self) -> bool:
        """A pre-filter is on: the kept chunks depend on the question."""
        return bool(self.prefilter_keep or self.prefilter_share)


def changing(model: type[BaseModel], kind: Changes) -> list[str]:
    """The fields of ``model`` that change a result of this kind."""
    return [name for name, field in model.model_fields.items() if meta(field)["changes"] == kind]
