"""The bundled sample, for `prism run` with no input (`make run`): real EDGAR filings and
questions about them, shipped in the package (prism/data/edgar). Its filings are ingested into a
corpus beside the results (unchanged files are not read again), and its question set runs over
it: the main job, end to end."""

from __future__ import annotations

import shutil
from importlib.resources import as_file, files
from pathlib import Path

from rich.console import Console

from prism.ingest.models import Chunking
from producer.ingest import ingest
from workers.settings import Settings

SAMPLE = files("prism").joinpath("data", "edgar")


def sample_corpus(results: str) -> str:
    """Where the sample's corpus goes: beside the runs, in the results store."""
    base = results if results.startswith("s3://") else str(Path(results).resolve())
    return f"{base.rstrip('/')}/sample-corpus"


def ingest_sample(settings: Settings, console: Console) -> tuple[str, str]:
    """The bundled question set and the corpus of the bundled filings, ingested now."""
    corpus = sample_corpus(settings.results)
    with console.status("ingesting the bundled EDGAR filings..."):
        summary = ingest(str(SAMPLE.joinpath("filings")), corpus, settings, Chunking())
    if summary.failed:
        raise RuntimeError(f"the bundled sample did not ingest: {summary.failures[0]}")
    questions = str(SAMPLE.joinpath("questions.jsonl"))
    console.print(
        f"no input given: the bundled sample, {summary.sources} real EDGAR filings in {corpus} "
        f"({summary.pages} pages) and the questions of {questions}",
        highlight=False,
    )
    return questions, corpus


def copy_sample(target: Path) -> tuple[int, Path]:
    """The bundled filings and question set, copied into ``target`` (filings/, questions.jsonl)."""
    with as_file(SAMPLE) as folder:
        shutil.copytree(folder / "filings", target / "filings", dirs_exist_ok=True)
        shutil.copy(folder / "questions.jsonl", target / "questions.jsonl")
    return sum(1 for _ in (target / "filings").iterdir()), target / "questions.jsonl"
