"""Every ranker and prompt the method knows, by name: settings, the CLI, dispatch and the docs
read them from here (a test checks the README against it)."""

from __future__ import annotations

from typing import Literal, get_args

Task = Literal["documents", "chunks"]
DocRankerName = Literal["llm", "lexical", "prior", "cascade", "fuse", "agents"]
ChunkRankerName = Literal["llm", "lexical", "hybrid", "financial", "a1", "a2", "a3", "a4", "evidence"]
PromptVariant = Literal["p1", "p2", "p3", "p4"]
# Where the question goes: after the candidates, so the questions over one filing share a cached
# prompt prefix at the provider, or first, as the method's own prompts put it.
PromptLayout = Literal["question_last", "question_first"]
ServiceTier = Literal["standard", "flex"]
ReasoningEffort = Literal["minimal", "low", "medium", "high"]
# As settings take them: "auto" picks by whether an LLM is configured.
DocRankerSetting = Literal["auto", "llm", "lexical", "prior", "cascade", "fuse", "agents"]
ChunkRankerSetting = Literal["auto", "llm", "lexical", "hybrid", "financial", "a1", "a2", "a3", "a4", "evidence"]

RANKERS: dict[Task, dict[str, str]] = {
    "documents": {
        "llm": "the LLM orders the five filing types (prompt PRISM_DOC_PROMPT)",
        "lexical": "BM25 over the filing-type descriptions, $0",
        "prior": "the learned filing-type prior, $0",
        "cascade": "the prior where it is confident, the LLM for the rest",
        "fuse": "reciprocal-rank fusion of the prior and the LLM",
        "agents": "a question analyzer's weights over five filing-type experts",
    },
    "chunks": {
        "llm": "segments ranked by the LLM, winners pooled and re-ranked (prompt PRISM_CHUNK_PROMPT)",
        "lexical": "BM25, $0",
        "hybrid": "BM25 + dense reciprocal-rank fusion (PRISM_DENSE), $0",
        "financial": "fused signals for financial pages: BM25 with metric synonyms, word pairs, LSA, periods, statements, figures; $0",
        "a1": "four role scorers, mean score",
        "a2": "noise remover, candidate selector, four weighted scorers",
        "a3": "quick filter, then three scorers",
        "a4": "a quantitative and a qualitative analyst",
        "evidence": "Selector/Adder evidence rounds and a grounded answer",
    },
}
# Rankers that never call an LLM.
FREE: dict[Task, frozenset[str]] = {
    "documents": frozenset({"lexical", "prior"}),
    "chunks": frozenset({"lexical", "hybrid", "financial"}),
}
# Document rankers that read the prior model.
NEEDS_PRIOR = frozenset({"prior", "cascade", "fuse"})
# Embedders that run in this process at $0; any other name is an embeddings model behind the gateway.
LOCAL_EMBEDDERS = frozenset({"hashed", "minilm", "wordllama"})
# Dense scorers of the pre-filter and the hybrid ranker that need no embeddings model.
LOCAL_SCORERS = LOCAL_EMBEDDERS | {"lsa", "financial", "financial-minilm"}

PROMPTS: dict[str, str] = {
    "p1": "role, filing-type descriptions and hints, a strict list of indices",
    "p2": "p1 with keyword ratios",
    "p3": "a reasoning scaffold with domain hints, exactly N indices",
    "p4": "p3 streamlined: a short, strict output contract and a few static examples",
}


LAYOUTS: dict[str, str] = {
    "question_last": "instructions, then the candidates, then the question and the output contract",
    "question_first": "instructions, then the question, then the candidates",
}


def names(task: Task) -> tuple[str, ...]:
    return tuple(RANKERS[task])


def uses_llm(task: Task, ranker: str) -> bool:
    return ranker not in FREE[task]


assert set(get_args(DocRankerName)) == set(RANKERS["documents"]), "DocRankerName and RANKERS disagree"
assert set(get_args(ChunkRankerName)) == set(RANKERS["chunks"]), "ChunkRankerName and RANKERS disagree"
assert set(get_args(DocRankerSetting)) == {"auto", *RANKERS["documents"]}, "DocRankerSetting disagrees"
assert set(get_args(ChunkRankerSetting)) == {"auto", *RANKERS["chunks"]}, "ChunkRankerSetting disagrees"
assert set(get_args(PromptVariant)) == set(PROMPTS), "PromptVariant and PROMPTS disagree"
assert set(get_args(PromptLayout)) == set(LAYOUTS), "PromptLayout and LAYOUTS disagree"
