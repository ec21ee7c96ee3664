"""What a run came to, for its report: its cost, its summary and a question set's evidence,
reckoned from its outcomes (prism/runs/outcomes.py) and what its evidence is made from
(prism/runs/evidence.py)."""

from __future__ import annotations

from dataclasses import dataclass

from prism.runs.evidence import CorpusPart, evidence_rows
from prism.runs.outcomes import RunOutcomes, cost_report, summarize


@dataclass(frozen=True)
class Figures:
    """What a run came to, for its report: its cost report (cost.json), its summary (summary.json:
    quality, latency, tokens and USD per task) and a question set's evidence rows and metrics."""

    cost: dict
    summary: dict
    evidence: tuple[list[dict], dict] | None

    @property
    def metrics(self) -> dict:
        """metrics.json: the summary's, with the question set's evidence metrics as "questions"."""
        return self.summary["metrics"] | ({"questions": self.evidence[1]} if self.evidence is not None else {})


def reckon(outcomes: RunOutcomes, evidence: tuple[list[dict], list[dict], CorpusPart] | None) -> Figures:
    """A run's figures from its outcomes and, for a question set, what its evidence is made from
    (its questions, plan rows and the part of the corpus they need)."""
    rows = evidence_rows(outcomes.results, *evidence) if evidence is not None else None
    return Figures(cost_report(outcomes), summarize(outcomes), rows)
