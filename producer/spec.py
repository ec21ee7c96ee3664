"""What a run is asked to do, and the error that says it cannot: light enough for every command
to import (the CLI loads the planners and the fleet only for the commands that use them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prism.models import RunConfig

if TYPE_CHECKING:
    from workers.corpus import Corpus
    from workers.settings import Settings


class RunError(Exception):
    """A run cannot start or go on; the message says why in one line."""


def open_corpus(uri: str, settings: Settings, empty_ok: bool = False) -> Corpus:
    """A corpus to read; one line when it must be upgraded first or holds nothing. Nothing is written."""
    from workers.corpus import Corpus
    from workers.store import open_store
    from workers.upgrade import needs_upgrade

    corpus = Corpus(open_store(uri, settings))
    if needs_upgrade(corpus):
        raise RunError(
            f"--corpus {uri}: kept in the catalogue format before this release; run `prism corpus upgrade --corpus {uri}` "
            "once (nothing is ingested again)"
        )
    if not empty_ok and not corpus.catalog.exists():
        raise RunError(f"--corpus {uri}: no filings there; ingest some first (prism ingest FILES --corpus ...)")
    return corpus


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
    # The catalogue as the run first planned it (each table's version; a bare number, the filings
    # table's, from a run before): a resume and a requeue plan there again. None: the newest.
    corpus_versions: dict[str, int] | int | None = None
