"""Prompt templates, kept as data: one system prompt per task and variant (P1-P4), one user
message per task and layout, one reminder for a reply that could not be read. ``$name``
placeholders.

Layout ``question_last`` keeps everything that is the same for every question over a filing
segment first (instructions, static examples, the candidates), so those questions share the
provider's cached prefix; a query's own in-context examples go after the candidates, never
before them."""

from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from string import Template

from prism.datasets import MARKERS
from prism.models import FILING_TYPES, Task
from prism.names import PromptLayout, PromptVariant

_DIR = files(__package__)


@dataclass(frozen=True)
class FilingType:
    name: str
    about: str
    keywords: dict[str, float]


@cache
def filing_types() -> tuple[tuple[FilingType, ...], tuple[str, ...]]:
    """The five types in candidate order, and the prior order (most often relevant first)."""
    data = tomllib.loads(_DIR.joinpath("filing_types.toml").read_text())
    types = tuple(FilingType(**t) for t in data["types"])
    assert tuple(t.name for t in types) == FILING_TYPES
    return types, tuple(data["prior_order"])


@dataclass(frozen=True)
class PromptTemplate:
    task: Task
    variant: PromptVariant
    system: Template
    user: Template
    reminder: Template
    layout: PromptLayout = "question_first"

    def messages(self, question: str, candidates: list[str], n: int, examples: str = "") -> list[dict]:
        marker = MARKERS[self.task]
        listing = "\n\n".join(marker.format(i) + text for i, text in enumerate(candidates))
        fields = _fields(n, len(candidates) - 1)
        # The system prompt is shared by every question only when the query's examples are not in it.
        shots = (
            {"system": examples, "user": ""} if self.layout == "question_first" else {"system": "", "user": examples}
        )
        system = self.system.substitute(fields | _document_hints(), examples=shots["system"])
        user = self.user.substitute(fields, question=question, candidates=listing, examples=shots["user"])
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def reminder_message(self, n: int, n_candidates: int) -> dict:
        return {"role": "user", "content": self.reminder.substitute(_fields(n, n_candidates - 1))}


@cache
def load(task: Task, variant: PromptVariant, layout: PromptLayout = "question_last") -> PromptTemplate:
    def read(name: str) -> Template:
        return Template(_DIR.joinpath(name).read_text())

    user = read(f"{task}_user_{layout}.txt")
    return PromptTemplate(task, variant, read(f"{task}_{variant}.txt"), user, read("reminder.txt"), layout)


def _fields(n: int, last: int) -> dict[str, object]:
    example = random.Random(n * 7919 + last).sample(range(last + 1), n)
    return {"n": n, "last": last, "example": str(example)}


@cache
def _document_hints() -> dict[str, str]:
    types, _ = filing_types()
    return {
        "type_guide": "\n".join(f"- [{i}] {t.name}: {t.about}" for i, t in enumerate(types)),
        "keyword_hints": "\n".join(f"- {t.name}: {', '.join(t.keywords)}" for t in types),
        "keyword_ratios": "\n".join(
            f"- {t.name}: " + ", ".join(f"{w} {share:.0%}" for w, share in t.keywords.items()) for t in types
        ),
    }
