"""The multi-agent variants, as rankers.

Documents: an analyzer weighs the five filing types (each >= 0.1, summing to 1), five type
experts score every type, and the weighted consensus ranks them.
Chunks (each a ranker over a segment or the pool of segment winners):
  A1 four role scorers (CEO, financial analyst, operations manager, risk analyst), mean score;
  A2 a noise remover (keeps at least 100, or all when fewer), a candidate selector, then four
     scorers weighted relevance 0.35, context 0.35, evidence 0.2, diversity -0.15;
  A3 a quick filter keeping 30-70%, then three scorers (relevance, context, evidence), mean;
  A4 two analysts (quantitative, qualitative), equal weights.
Agents of one step run at the same time (threads; each request still goes through the fleet
limiter). Replies are JSON validated by pydantic; an unreadable reply is asked once more, then
that agent is left out and the result flagged.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass
from functools import cache, partial
from importlib.resources import files
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

from prism.datasets import MARKERS
from prism.llm import ContextTooLong, Gateway, quoted_reply
from prism.models import FILING_TYPES, Flag, Ranking, Stage, Task
from prism.ranking.prompts import filing_types

M = TypeVar("M", bound=BaseModel)


@cache
def roles() -> dict:
    return tomllib.loads(files("prism.ranking.prompts").joinpath("agents.toml").read_text())


# -- reply shapes ---------------------------------------------------------------------------


class Score(BaseModel):
    index: int
    score: float = Field(ge=1, le=10)
    reasoning: str = ""


class Scores(BaseModel):
    scores: list[Score]


class Weights(BaseModel):
    weights: dict[str, float]

    @field_validator("weights")
    @classmethod
    def _five_types(cls, weights: dict[str, float]) -> dict[str, float]:
        if set(weights) != set(FILING_TYPES):
            raise ValueError(f"weights must name exactly {FILING_TYPES}")
        if min(weights.values()) < 0.1 - 1e-9:
            raise ValueError("every weight must be at least 0.1")
        if abs(sum(weights.values()) - 1) > 0.01:
            raise ValueError("the weights must add up to 1")
        return weights


class Keep(BaseModel):
    keep: list[int]


SHAPES: dict[type[BaseModel], str] = {
    Scores: 'scores-json {"scores": [{"index": 0, "score": 7, "reasoning": "..."}]}',
    Weights: 'weights-json {"weights": {"DEF14A": 0.1, "10-K": 0.4, "10-Q": 0.2, "8-K": 0.1, "Earnings": 0.2}}',
    Keep: 'keep-json {"keep": [0, 3, 4]}',
}


def shape_line(shape: type[BaseModel]) -> str:
    return f"\nReply with one JSON object and nothing else.\nReply format: {SHAPES[shape]}"


def parse_json(reply: str, shape: type[M]) -> M:
    """The JSON object in the reply, validated; raises ValueError naming what is wrong."""
    match = re.search(r"\{.*\}", reply or "", re.S)
    if not match:
        raise ValueError("no JSON object in the reply")
    try:
        return shape.model_validate(json.loads(match.group(0)))
    except (json.JSONDecodeError, ValidationError) as err:
        raise ValueError(f"the JSON does not fit {shape.__name__}: {str(err).splitlines()[0]}") from None


@dataclass
class Agent:
    """One LLM role that answers in a JSON shape."""

    gateway: Gateway
    stage: Stage
    model: str
    max_output_tokens: int | None = None

    def ask(self, system: str, user: str, shape: type[M], notes: list[str]) -> M | None:
        messages = [{"role": "system", "content": system + shape_line(shape)}, {"role": "user", "content": user}]
        reply = self._send(messages)
        try:
            return parse_json(reply, shape)
        except ValueError as first:
            retry = [
                *messages,
                quoted_reply(self.gateway, reply),
                {
                    "role": "user",
                    "content": f"That reply was not usable ({first}). Reply again with only the JSON object, in the shape asked for.",
                },
            ]
            try:
                return parse_json(self._send(retry), shape)
            except ContextTooLong:
                notes.append(f"an agent's reply was unusable ({first}) and the retry over the model context; left out")
                return None
            except ValueError as second:
                notes.append(f"an agent's reply was unusable twice ({second}); left out")
                return None

    def _send(self, messages: list[dict]) -> str:
        return self.gateway.complete(
            messages, stage=self.stage, model=self.model, max_output_tokens=self.max_output_tokens
        ).text


def in_parallel(calls: Sequence[Callable[[], Any]]) -> list:
    """Run the calls at once, each in a copy of this context (so its LLM calls are recorded
    and charged here)."""
    if len(calls) == 1:
        return [calls[0]()]
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(copy_context().run, call) for call in calls]
        return [f.result() for f in futures]


def listing(task: Task, question: str, candidates: Sequence[str]) -> str:
    marker = MARKERS[task]
    body = "\n\n".join(marker.format(i) + text for i, text in enumerate(candidates))
    heading = "Filing types" if task == "documents" else "Text chunks"
    return f"Question: {question}\n\n{heading}:\n{body}"


def scores_of(reply: Scores | None, n: int, notes: list[str]) -> list[float] | None:
    """Scores by candidate; candidates the agent skipped get the lowest score (and a note)."""
    if reply is None:
        return None
    out: dict[int, float] = {}
    for s in reply.scores:
        if 0 <= s.index < n and s.index not in out:
            out[s.index] = s.score
    if len(out) < n:
        notes.append(f"an agent scored {len(out)} of {n} candidates; the rest count as 1")
    return [out.get(i, 1.0) for i in range(n)]


def _ranked(total: list[float], top_k: int, notes: list[str], flags: list) -> Ranking:
    order = sorted(range(len(total)), key=lambda i: (-total[i], i))[:top_k]
    return Ranking(indices=order, scores=[round(total[i], 4) for i in order], notes=notes, flags=flags)


# -- documents ------------------------------------------------------------------------------


class DocumentAgents:
    """Analyzer weights x five type experts' scores."""

    name = "agents"

    def __init__(self, agent: Agent):
        self.agent = agent

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        text = roles()["documents"]
        user = listing("documents", question, candidates)
        notes: list[str] = []
        types, _ = filing_types()
        experts = [text["expert"].format(type=t.name, about=t.about) for t in types]
        replies = in_parallel(
            [partial(self.agent.ask, text["analyzer"], user, Weights, notes)]
            + [partial(self.agent.ask, system, user, Scores, notes) for system in experts]
        )
        weights, expert_scores = replies[0], replies[1:]
        flags: list[Flag] = []
        if weights is None:
            weights, flags = Weights(weights={t: 0.2 for t in FILING_TYPES}), ["repaired"]
            notes.append("no usable weights from the analyzer; equal weights used")
        total = [0.0] * len(candidates)
        used = 0.0
        for t, reply in zip(FILING_TYPES, expert_scores):
            scores = scores_of(reply, len(candidates), notes)
            if scores is None:
                flags = ["repaired"]
                continue
            weight = weights.weights[t]
            used += weight
            total = [a + weight * b for a, b in zip(total, scores)]
        if not used:
            raise ValueError("no type expert gave a usable reply")
        return _ranked([v / used for v in total], top_k, notes, flags)


# -- chunks ---------------------------------------------------------------------------------

A2_WEIGHTS = {"relevance": 0.35, "context": 0.35, "evidence": 0.2, "diversity": -0.15}
VARIANTS: dict[str, dict[str, Any]] = {
    "a1": {
        "filters": (),
        "weights": dict.fromkeys(("ceo", "financial_analyst", "operations_manager", "risk_analyst"), 0.25),
    },
    "a2": {"filters": ("noise", "select"), "weights": A2_WEIGHTS},
    "a3": {"filters": ("quick",), "weights": dict.fromkeys(("relevance", "context", "evidence"), 1 / 3)},
    "a4": {"filters": (), "weights": {"quantitative": 0.5, "qualitative": 0.5}},
}
# How much each filter keeps: (least share, most share, least count).
KEEP = {"noise": (0.0, 1.0, 100), "select": (0.3, 1.0, 10), "quick": (0.3, 0.7, 1)}


class ChunkAgents:
    name = "agents"

    def __init__(self, variant: str, agent: Agent):
        self.variant, self.agent = variant, agent
        self.name = variant

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        spec, text = VARIANTS[self.variant], roles()["chunks"]
        notes: list[str] = []
        flags: list[Flag] = []
        alive = list(range(len(candidates)))
        for name in spec["filters"]:
            alive = self._filter(name, question, candidates, alive, notes, flags)
        shown = [candidates[i] for i in alive]
        user = listing("chunks", question, shown)
        systems = {role: f"{text['common']} {text['roles'][role]}" for role in spec["weights"]}
        replies = in_parallel([partial(self.agent.ask, s, user, Scores, notes) for s in systems.values()])
        total, used = [0.0] * len(shown), 0.0
        for (_role, weight), reply in zip(spec["weights"].items(), replies):
            scores = scores_of(reply, len(shown), notes)
            if scores is None:
                flags.append("repaired")
                continue
            used += abs(weight)
            total = [a + weight * b for a, b in zip(total, scores)]
        if not used:
            raise ValueError("no scorer gave a usable reply")
        ranking = _ranked(total, top_k, notes, list(dict.fromkeys(flags)))
        return ranking.model_copy(update={"indices": [alive[i] for i in ranking.indices]})

    def _filter(
        self, name: str, question: str, candidates: Sequence[str], alive: list[int], notes: list[str], flags: list
    ) -> list[int]:
        low, high, least = KEEP[name]
        n = len(alive)
        floor, ceiling = min(n, max(least, round(low * n))), max(1, round(high * n))
        if name == "noise" and n <= least:
            return alive  # keeps at least 100: nothing to remove from fewer
        system = roles()["chunks"]["filter"] + f" Keep between {floor} and {ceiling} of the {n} chunks."
        reply = self.agent.ask(system, listing("chunks", question, [candidates[i] for i in alive]), Keep, notes)
        kept = list(dict.fromkeys(i for i in (reply.keep if reply else []) if 0 <= i < n))
        if reply is None or not floor <= len(kept) <= ceiling:
            flags.append("repaired")
            notes.append(
                f"the {name} filter kept {len(kept)} of {n}, outside {floor}..{ceiling}; kept its first {ceiling} or all"
            )
            kept = kept[:ceiling] if len(kept) >= floor else list(range(n))
        return [alive[i] for i in sorted(kept)]
