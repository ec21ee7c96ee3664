"""What a run is asked to do, and the error that says it cannot: light enough for every command
to import (the CLI loads the planners and the fleet only for the commands that use them)."""

from __future__ import annotations

from dataclasses import dataclass

from prism.models import RunConfig


class RunError(Exception):
    """A run cannot start or go on; the message says why in one line."""


@dataclass(frozen=True)
class RunSpec:
    """What the producer needs to plan a run; the manifest keeps it for resume. The options it
    runs with (budget, limit and how requests are sent among them) are its config's."""

    run_id: str
    input: str
    results: str
    config: RunConfig
    reuse: bool = True
    corpus: str | None = None  # a question set over this corpus (input is the question set)
    since: str | None = None  # `--new`: the last run over the corpus, whose unchanged questions are copied
