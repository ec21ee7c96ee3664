"""What several commands share: the console, the arguments that are not options, and the way a
run's end becomes the command's exit status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from producer.summary import print_summary
from workers.settings import Settings

if TYPE_CHECKING:
    from producer.reader import RunEnd, RunReader

console = Console(stderr=True, soft_wrap=True)
SAID_LINES = 5  # bad lines and questions with no filing a command names; the rest are counted

InputArg = Annotated[
    str | None,
    typer.Argument(
        help="Benchmark rows (JSONL, plain or .gz): a path, a folder, or s3://bucket/key (a prefix ending in '/'). "
        "Default: with no --questions either, the bundled EDGAR filings and their questions."
    ),
]
RunIdOpt = Annotated[str | None, typer.Option("--run-id", help="Reuse a run id; default: a new one.")]
QuestionsOpt = Annotated[
    str | None, typer.Option("--questions", help="A question set (JSONL) over --corpus, instead of INPUT.")
]
CorpusOpt = Annotated[str | None, typer.Option("--corpus", help="The corpus (prism ingest) the question set is over.")]
WaitOpt = Annotated[bool, typer.Option(help="Wait for the run to finish and report.")]
TimeoutOpt = Annotated[float | None, typer.Option(min=1, help="Stop waiting after this many seconds.")]


def count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def open_reader(settings: Settings) -> RunReader:
    """Runs as stored, for the commands that read them: no broker, no fleet."""
    from producer.reader import RunReader

    return RunReader(settings)


def finish(end: RunEnd, wait: bool) -> None:
    """Print the run id (not waiting) or the summary, and exit with the run's status code."""
    from prism.models import EXIT_CODES

    if not wait:
        typer.echo(end.manifest.run_id)
        return
    print_summary(end)
    for error in end.input_errors[:SAID_LINES]:
        console.print(f"[yellow]invalid input:[/yellow] {error}", highlight=False)
    if len(end.input_errors) > SAID_LINES:
        console.print(f"... and {len(end.input_errors) - SAID_LINES} more in failures.jsonl")
    if code := EXIT_CODES.get(end.manifest.status, 0):
        raise typer.Exit(code)
