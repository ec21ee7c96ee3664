"""Rankers behind one interface: ``rank(question, candidates, top_k) -> Ranking``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from prism import prompts
from prism.lexical import LexicalRanker
from prism.llm import Gateway
from prism.models import RankerName, Ranking, RunConfig, Stage
from prism.parsing import UnparseableReply, parse_ranking


class Ranker(Protocol):
    name: RankerName

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking: ...


class LlmRanker:
    """Asks the LLM for the top ``k``; one stricter retry when the reply is unreadable, then the
    fallback ranker. A short reply is filled from the fallback's order. Each fix is flagged."""

    name = "llm"

    def __init__(
        self,
        gateway: Gateway,
        prompt: prompts.PromptTemplate,
        stage: Stage,
        model: str,
        fallback: Ranker,
        max_output_tokens: int | None = None,
    ):
        self.gateway, self.prompt, self.stage, self.model = gateway, prompt, stage, model
        self.fallback, self.max_output_tokens = fallback, max_output_tokens

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        n, want = len(candidates), min(top_k, len(candidates))
        messages = self.prompt.messages(question, list(candidates), want)
        reply = self._ask(messages)
        flags: list = []
        try:
            parsed = parse_ranking(reply, n, want)
        except UnparseableReply as first:
            retry = [*messages, {"role": "assistant", "content": reply}, self.prompt.reminder_message(want, n)]
            try:
                parsed = parse_ranking(self._ask(retry), n, want)
                flags.append("retried")
            except UnparseableReply as second:
                note = f"LLM reply unusable twice ({first}; {second}); ranked by {self.fallback.name}"
                return self.fallback.rank(question, candidates, want).flagged("fallback", note=note)
        indices, notes = parsed.indices, list(parsed.problems)
        if len(indices) < want:
            order = self.fallback.rank(question, candidates, n).indices
            indices = indices + [i for i in order if i not in indices][: want - len(indices)]
            notes.append(f"filled the last {want - len(parsed.indices)} places from the {self.fallback.name} order")
        if notes:
            flags.append("repaired")
        return Ranking(indices=indices, flags=flags, notes=notes)

    def _ask(self, messages: list[dict]) -> str:
        return self.gateway.complete(
            messages, stage=self.stage, model=self.model, max_output_tokens=self.max_output_tokens
        ).text


def document_lexical_ranker() -> LexicalRanker:
    """BM25 over what each filing type holds; ties go to the type most often relevant."""
    types, prior = prompts.filing_types()
    expand = {t.name: f"{t.name} {t.about} {' '.join(t.keywords)}" for t in types}
    return LexicalRanker(expand=expand, tie_order=prior)


def build_ranker(config: RunConfig, stage: Stage, gateway: Gateway | None) -> Ranker:
    """The ranker a run's config asks for at one stage (documents, segments or rerank)."""
    task = "documents" if stage == "documents" else "chunks"
    lexical = document_lexical_ranker() if task == "documents" else LexicalRanker()
    if config.ranker_for(task) == "lexical":
        return lexical
    if gateway is None:
        raise ValueError(f"the {task} ranker is 'llm' but no LLM endpoint is configured")
    variant = config.doc_prompt if task == "documents" else config.chunk_prompt
    return LlmRanker(gateway, prompts.load(task, variant), stage, config.models[stage], lexical, config.max_output_tokens)
