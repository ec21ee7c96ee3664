"""Evidence selection in rounds: a question analyzer writes sub-questions; each round a strict
Selector keeps the passages that directly answer one, then an Adder adds only what closes a
sub-question still open (or nothing); the picks merge without duplicates; the rounds stop
early when one changes nothing. An answer generator then answers from the evidence alone.

Levers, all configuration: the number of rounds (1-5), the Selector's strictness wording, the
Adder's focus, and how finely the question is split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from prism.models import Ranking
from prism.ranking.strategies.agents import SHAPES, Agent, listing, roles


class SubQuestions(BaseModel):
    sub_questions: list[str] = Field(min_length=1, max_length=12)


class Selected(BaseModel):
    selected: list[int]


class Added(BaseModel):
    add: list[int]


class Answer(BaseModel):
    answer: str


SHAPES[SubQuestions] = 'subquestions-json {"sub_questions": ["..."]}'
SHAPES[Selected] = 'select-json {"selected": [2, 5]}'
SHAPES[Added] = 'add-json {"add": []}'
SHAPES[Answer] = 'answer-json {"answer": "..."}'


@dataclass(frozen=True)
class Levers:
    rounds: int = 3
    strictness: str = "strict"  # or "lenient"
    focus: str = "focus_gaps"  # or "focus_support"
    granularity: str = "granularity_coarse"  # or "granularity_fine"


class EvidenceRanker:
    """Ranks by evidence: the picked passages in the order they were picked. The sub-questions
    and the answer travel in the ranking's details."""

    name = "evidence"

    def __init__(self, agent: Agent, levers: Levers = Levers()):
        if not 1 <= levers.rounds <= 5:
            raise ValueError("evidence rounds must be between 1 and 5")
        self.agent, self.levers = agent, levers

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        text, lever = roles()["evidence"], roles()["evidence"]["levers"]
        notes: list[str] = []
        n = len(candidates)
        asked = self.agent.ask(
            text["analyzer"].format(granularity=lever[self.levers.granularity]),
            f"Question: {question}",
            SubQuestions,
            notes,
        )
        subs = asked.sub_questions if asked else [question]
        if asked is None:
            notes.append("no usable sub-questions; the question itself is the only one")
        head = "Sub-questions:\n" + "\n".join(f"{i + 1}. {s}" for i, s in enumerate(subs))
        passages = listing("chunks", question, candidates)
        evidence: list[int] = []
        rounds = 0
        for rounds in range(1, self.levers.rounds + 1):  # noqa: B007 - read after the loop
            before = list(evidence)
            picked = self._indices(
                self.agent.ask(
                    text["selector"].format(strictness=lever[self.levers.strictness]),
                    f"{head}\n\n{passages}\n\nPicked so far: {evidence or '[]'}",
                    Selected,
                    notes,
                ),
                "selected",
                n,
            )
            evidence = list(dict.fromkeys(evidence + picked))
            added = self._indices(
                self.agent.ask(
                    text["adder"].format(focus=lever[self.levers.focus]),
                    f"{head}\n\n{passages}\n\nPicked so far: {evidence or '[]'}",
                    Added,
                    notes,
                ),
                "add",
                n,
            )
            evidence = list(dict.fromkeys(evidence + added))
            if evidence == before:
                break
        quoted = "\n\n".join(f"[Passage {i}] {candidates[i]}" for i in evidence) or "(no evidence was found)"
        reply = self.agent.ask(text["answer"], f"Question: {question}\n\nEvidence:\n{quoted}", Answer, notes)
        details = {
            "sub_questions": subs,
            "evidence": evidence,
            "answer": reply.answer if reply else None,
            "rounds": rounds,
        }
        return Ranking(indices=evidence[:top_k], notes=notes, flags=["repaired"] if notes else [], details=details)

    @staticmethod
    def _indices(reply: BaseModel | None, field: str, n: int) -> list[int]:
        return [i for i in (getattr(reply, field) if reply else []) if 0 <= i < n]
