"""Rankers behind one interface: ``rank(question, candidates, top_k) -> Ranking``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prism.llm import ContextTooLong, Gateway, prefix_id, quoted_reply
from prism.models import Ranker, Ranking, RunConfig, Stage, Task
from prism.names import NEEDS_PRIOR
from prism.ranking import prompts
from prism.ranking.embeddings import embedder, local_embedder
from prism.ranking.hybrid import HybridRanker, dense_scorer, rrf
from prism.ranking.icl import ExampleStore, examples_for
from prism.ranking.lexical import LexicalRanker
from prism.ranking.parsing import UnparseableReply, parse_ranking
from prism.ranking.prior import DocPrior
from prism.ranking.retrieval import FinancialRanker
from prism.ranking.strategies.agents import Agent, ChunkAgents, DocumentAgents
from prism.ranking.strategies.evidence import EvidenceRanker, Levers


class LlmRanker:
    """Asks the LLM for the top ``k``; one stricter retry when the reply is unreadable, then the
    fallback ranker (also when the retry does not fit the context). A short reply is filled from
    the fallback's order. Each fix is flagged."""

    name = "llm"

    def __init__(
        self,
        gateway: Gateway,
        prompt: prompts.PromptTemplate,
        stage: Stage,
        model: str,
        fallback: Ranker,
        max_output_tokens: int | None = None,
        examples: Callable[[str], str] | None = None,
    ):
        self.gateway, self.prompt, self.stage, self.model = gateway, prompt, stage, model
        self.fallback, self.max_output_tokens, self.examples = fallback, max_output_tokens, examples

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        n, want = len(candidates), min(top_k, len(candidates))
        shots = self.examples(question) if self.examples else ""
        messages = self.prompt.messages(question, list(candidates), want, examples=shots)
        # The candidates (a filing segment) are what other questions share with this prompt.
        shared = prefix_id(list(candidates))
        reply = self._ask(messages, shared)
        flags: list = []
        try:
            parsed = parse_ranking(reply, n, want)
        except UnparseableReply as first:
            retry = [*messages, quoted_reply(self.gateway, reply), self.prompt.reminder_message(want, n)]
            try:
                parsed = parse_ranking(self._ask(retry, shared), n, want)
                flags.append("retried")
            except (UnparseableReply, ContextTooLong) as second:
                why = "the retry is over the model context" if isinstance(second, ContextTooLong) else second
                note = f"LLM reply unusable twice ({first}; {why}); ranked by {self.fallback.name}"
                fell = self.fallback.rank(question, candidates, want).flagged("fallback", note=note)
                return fell.model_copy(update={"ranker": f"fallback:{self.fallback.name}"})
        indices, notes = parsed.indices, list(parsed.problems)
        if len(indices) < want:
            order = self.fallback.rank(question, candidates, n).indices
            indices = indices + [i for i in order if i not in indices][: want - len(indices)]
            notes.append(f"filled the last {want - len(parsed.indices)} places from the {self.fallback.name} order")
        if notes:
            flags.append("repaired")
        return Ranking(indices=indices, flags=flags, notes=notes, ranker="llm-repaired" if notes else "llm")

    def _ask(self, messages: list[dict], shared: str) -> str:
        return self.gateway.complete(
            messages,
            stage=self.stage,
            model=self.model,
            max_output_tokens=self.max_output_tokens,
            shared_prefix=shared,
        ).text


def document_lexical_ranker() -> LexicalRanker:
    """BM25 over what each filing type holds; ties go to the type most often relevant."""
    types, prior = prompts.filing_types()
    expand = {t.name: f"{t.name} {t.about} {' '.join(t.keywords)}" for t in types}
    return LexicalRanker(expand=expand, tie_order=prior)


class CascadeRanker:
    """The prior where it is confident; the LLM only for the rest."""

    name = "cascade"

    def __init__(self, prior: DocPrior, llm: Ranker, threshold: float):
        self.prior, self.llm, self.threshold = prior, llm, threshold

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        predicted = self.prior.predict([question])[0]
        confidence = float(self.prior.confidence(predicted)[0])
        if confidence >= self.threshold:
            return self.prior.rank_predicted(predicted, candidates, top_k)
        ranking = self.llm.rank(question, candidates, top_k)
        note = f"prior confidence {confidence:.3f} < {self.threshold:.3f}: asked the LLM"
        return ranking.model_copy(update={"answered_by": "llm", "notes": [note, *ranking.notes]})


def cascade_threshold(config: RunConfig, prior: DocPrior) -> float:
    """The prior's confidence below which a cascade asks the LLM: the run's, else the model's own."""
    return config.cascade_threshold if config.cascade_threshold is not None else prior.threshold


def asks_llm(config: RunConfig, prior: DocPrior, question: str) -> bool:
    """Whether ranking a question's filing types calls the LLM: never for a $0 ranker, for a
    cascade only where the prior's confidence is under its threshold, else always."""
    if not config.uses_llm("documents"):
        return False
    if config.doc_ranker != "cascade":
        return True
    return float(prior.confidence(prior.predict([question])[0])[0]) < cascade_threshold(config, prior)


class FuseRanker:
    """Weighted reciprocal-rank fusion of the prior's and the LLM's rankings."""

    name = "fuse"

    def __init__(self, prior: DocPrior, llm: Ranker, weights: tuple[float, float] = (1.0, 1.0), k: int = 60):
        self.prior, self.llm, self.weights, self.k = prior, llm, weights, k

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        n = len(candidates)
        prior = self.prior.rank(question, candidates, n)
        llm = self.llm.rank(question, candidates, n)
        score = rrf([prior.indices, llm.indices], self.weights, self.k)
        order = sorted(range(n), key=lambda i: (-score[i], prior.indices.index(i)))[:top_k]
        return Ranking(
            indices=order,
            scores=[round(score[i], 6) for i in order],
            flags=llm.flags,
            answered_by="fuse",
            notes=[*prior.notes, *llm.notes],
        )


def build_ranker(
    config: RunConfig,
    stage: Stage,
    gateway: Gateway | None,
    prior: DocPrior | None = None,
    examples: ExampleStore | None = None,
) -> Ranker:
    """The ranker a run's config asks for at one stage (documents, segments or rerank)."""
    task: Task = "documents" if stage == "documents" else "chunks"
    lexical = document_lexical_ranker() if task == "documents" else LexicalRanker()
    kind = config.ranker_for(task)
    if kind == "lexical":
        return lexical
    if kind == "hybrid":
        return HybridRanker(dense_scorer(config.dense, gateway))
    if kind == "financial":
        return FinancialRanker(embedder=local_embedder("minilm") if config.dense == "financial-minilm" else None)
    if kind in NEEDS_PRIOR and prior is None:
        raise ValueError(f"the documents ranker is {kind!r} but no prior model is loaded")
    if kind == "prior" and prior is not None:
        return prior
    if gateway is None:
        raise ValueError(f"the {task} ranker is {kind!r}, which asks an LLM, but no LLM endpoint is configured")
    agent_stage = "evidence" if kind == "evidence" else stage
    agent = Agent(gateway, agent_stage, config.models[agent_stage], config.output_cap(agent_stage))
    if kind == "agents":
        return DocumentAgents(agent)
    if kind in ("a1", "a2", "a3", "a4"):
        return ChunkAgents(kind, agent)
    if kind == "evidence":
        levers = Levers(
            config.evidence_rounds, config.evidence_strictness, config.evidence_focus, config.evidence_granularity
        )
        return EvidenceRanker(agent, levers)
    variant = config.doc_prompt if task == "documents" else config.chunk_prompt
    fallback = prior if task == "documents" and prior is not None else lexical
    shots = None
    if config.icl.get(task):
        if examples is None:
            raise ValueError(f"in-context examples are on for {task} but no example store is loaded")
        shots = examples_for(examples, embedder(config.models["embeddings"], gateway), config.icl[task], task)
    llm = LlmRanker(
        gateway,
        prompts.load(task, variant, config.prompt_layout),
        stage,
        config.models[stage],
        fallback,
        config.output_cap(stage),
        shots,
    )
    if kind == "cascade" and prior is not None:
        return CascadeRanker(prior, llm, cascade_threshold(config, prior))
    if kind == "fuse" and prior is not None:
        return FuseRanker(prior, llm, config.fuse_weights)
    return llm
