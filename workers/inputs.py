"""A corpus filing's chunk input for a segment budget: the chunks' prompt costs and the chunks cut
to fit, made once per version and budget and shared by every question (and run) over it; kept in
the corpus at ``inputs/<filing>/<version>-<budget>-<encoding>.json``. The texts stay in the filing.
And what a plan's queries would cost, priced from those stored costs (`prism estimate`, and a
question-set run's report)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pydantic import BaseModel

from prism.ingest.models import Chunking, Filing, FilingEntry
from prism.llm.pricing import PriceTable
from prism.models import FILING_TYPES, Query, QuestionPlan, RunConfig, Stage
from prism.ranking.strategies.chunks import MAX_CHUNK_SHARE, ChunkInput, prepare
from prism.runs.estimate import Estimate, Priced, estimate
from prism.runs.lifecycle import error_text
from prism.segmenting import MARKER_TOKENS, TokenCounter
from workers.corpus import Corpus
from workers.settings import Settings
from workers.store import get_model, put_model, safe_name


class FilingInput(BaseModel):
    """What chunk ranking needs of a filing beyond its chunks, for one segment budget; the texts
    stay in the filing (only a chunk cut to fit the budget is kept here)."""

    filing_id: str
    version: str
    costs: list[int]
    truncated: dict[int, str] = {}
    exact_counts: bool = True


def input_key(filing_id: str, version: str, budget: int, encoding: str) -> str:
    return f"inputs/{safe_name(filing_id)}/{version}-{budget}-{encoding}.json"


def put_input(corpus: Corpus, filing: Filing, budget: int, counter: TokenCounter) -> tuple[str, FilingInput]:
    """A filing's chunk input for a budget: read when made, else made and stored."""
    key = input_key(filing.id, filing.version, budget, _encoding(counter))
    try:
        return key, get_model(corpus.store, key, FilingInput)
    except KeyError:
        pass
    shared = make_input(filing, budget, counter)
    put_model(corpus.store, key, shared, if_absent=True)
    return key, shared


def make_input(filing: Filing, budget: int, counter: TokenCounter) -> FilingInput:
    """A filing's chunk input for a segment budget, made here; nothing is stored."""
    data = prepare("", [c.text for c in filing.chunks], counter, budget, counts=counts(filing, counter))
    return FilingInput(
        filing_id=filing.id,
        version=filing.version,
        costs=data.costs,
        truncated={i: data.chunks[i] for i in data.truncated},
        exact_counts=data.exact_counts,
    )


def input_for(
    corpus: Corpus, filing_id: str, version: str, budget: int, counter: TokenCounter
) -> tuple[str, FilingInput]:
    """A filing version's chunk input for a budget, read when made, else made from the filing."""
    key = input_key(filing_id, version, budget, _encoding(counter))
    try:
        return key, get_model(corpus.store, key, FilingInput)
    except KeyError:
        return put_input(corpus, corpus.get_filing(filing_id, version), budget, counter)


def token_costs(corpus: Corpus, entry: FilingEntry, version: str, budget: int, counter: TokenCounter) -> list[int]:
    """A filing version's chunks' prompt tokens, from what the corpus stores, no filing read: its
    chunk input for this budget, else one for another budget (a chunk cut to fit there is cut to
    fit here), else its chunks and tokens spread evenly (an ingest that stored none)."""
    try:
        return get_model(corpus.store, input_key(entry.id, version, budget, _encoding(counter)), FilingInput).costs
    except KeyError:
        pass
    if other := next(iter(corpus.store.keys(f"inputs/{safe_name(entry.id)}/{version}-")), None):
        most = max(MARKER_TOKENS + 16, budget // MAX_CHUNK_SHARE)
        return [min(cost, most) for cost in get_model(corpus.store, other, FilingInput).costs]
    stored = next(v for v in entry.versions if v.version == version)
    each = stored.tokens // stored.chunks + MARKER_TOKENS if stored.chunks else 0
    return [each] * stored.chunks


def counts(filing: Filing, counter: TokenCounter) -> list[int] | None:
    """The chunks' token counts from the ingest, when it counted them with this tokenizer."""
    counted = filing.exact_tokens and filing.encoding == _encoding(counter)
    return [c.tokens for c in filing.chunks] if counted else None


def as_chunk_input(filing: Filing, shared: FilingInput) -> ChunkInput:
    """A filing and its stored input, already in hand, as a ChunkInput with no question."""
    texts = [shared.truncated.get(c.index, c.text) for c in filing.chunks]
    return ChunkInput(
        question="",
        chunks=texts,
        costs=shared.costs,
        truncated=sorted(shared.truncated),
        exact_counts=shared.exact_counts,
    )


def _encoding(counter: TokenCounter) -> str:
    return counter.encoding.name if counter.encoding is not None else "estimate"


def estimate_run(
    plans: Sequence[QuestionPlan], corpus: Corpus, settings: Settings, config: RunConfig
) -> Estimate | str | None:
    """What a question-set run's plans would cost as `prism estimate` prices them, where an LLM
    ranks (None otherwise), under the settings it ran with; why not, where it cannot be made.
    The plans are the run's own: nothing is planned again, no filing read."""
    if not (config.uses_llm("documents") or config.uses_llm("chunks")):
        return None
    try:
        return estimate_plans(plans, corpus, settings, config)
    except Exception as err:  # noqa: BLE001 - the report says why and is written all the same
        return error_text(err)


def estimate_plans(plans: Sequence[QuestionPlan], corpus: Corpus, settings: Settings, config: RunConfig) -> Estimate:
    """The plans a question-set run made, priced as `prism estimate` prices a plan: its document
    rankings and the pairs it ranked (not those it reused from an earlier run, which cost $0)."""
    documents = [p.question for p in plans if p.documents == "done"]
    pairs = [(p.question, pair.filing, pair.version) for p in plans for pair in p.pairs if pair.state != "reused"]
    return price(
        documents, pairs, corpus, settings, config, config.expected_outputs(settings.llm_expected_output_tokens)
    )


def price(
    documents: list[str],
    pairs: list[tuple[str, str, str]],
    corpus: Corpus,
    settings: Settings,
    config: RunConfig,
    expected_output: dict[Stage, int],
    reasoning_share: float = 0.0,
) -> Estimate:
    """Each document ranking an LLM makes, and each (question, filing, version) pair's chunk query
    from the token counts the corpus stores."""
    counter = TokenCounter(Chunking().encoding)
    heads: dict[str, FilingEntry | None] = {}

    def queries() -> Iterator[Query | Priced]:
        for i, question in enumerate(documents):
            yield Query(id=f"d{i}", task="documents", question=question, candidates=list(FILING_TYPES))
        for question, fid, version in pairs:
            head = heads[fid] if fid in heads else heads.setdefault(fid, corpus.head(fid))
            costs = (
                token_costs(corpus, head, version, config.segment_tokens, counter)
                if config.uses_llm("chunks") and head is not None
                else []
            )
            yield Priced(question, costs, f"{fid}@{version}")

    prices = PriceTable.load(settings.prices_file)
    return estimate(queries(), config, prices, expected_output, settings.prompt_cache_key, counter, reasoning_share)
