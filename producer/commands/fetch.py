"""`prism fetch`: the night's filings from EDGAR, by its indexes, into a folder or s3:// prefix."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Annotated, Any

import typer

from producer.commands.common import console
from producer.flags import flags, settings_with
from producer.spec import RunError

if TYPE_CHECKING:
    from producer.fetch import FetchSummary

SHOWN = 10  # failures printed; the day records keep every one


@flags("fetch")
def fetch(
    out: Annotated[str, typer.Option("--out", help="Where the filings go: a folder or s3://bucket/prefix.")],
    since: Annotated[
        str, typer.Option("--since", help="The first day (YYYY-MM-DD), or 'last': the days after the last done fetch.")
    ],
    until: Annotated[str | None, typer.Option("--until", help="The last day (YYYY-MM-DD); default today.")] = None,
    ingest: Annotated[bool, typer.Option("--ingest", help="Then ingest the target into --corpus.")] = False,
    corpus: Annotated[str | None, typer.Option("--corpus", help="The corpus --ingest ingests into.")] = None,
    **options: Any,
) -> None:
    """Download the filings EDGAR's indexes list for some days (a day's daily index, or the full
    index of the quarters a range spans), those --forms, --ciks and --question-set take, as their
    complete submissions: one fleet task per filing, inside SEC's fair-access rate across the
    whole fleet (PRISM_EDGAR_RPS), named by PRISM_SEC_USER_AGENT. A filing already in the target
    is not fetched again; each day is recorded, done when all its filings are there, for
    --since last. Exits 3 when some filings failed, 1 when every one did."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from producer.archives import filter_of
    from producer.fetch import fetch as fetch_filings
    from producer.fetch import require_agent

    settings = settings_with(options)
    require_agent(settings)
    if ingest and corpus is None:
        raise RunError("--ingest: give the --corpus to ingest into")
    first = None if since == "last" else _day(since, "--since")
    last = _day(until, "--until") if until else None
    columns = (TextColumn("fetching filings"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("fetch", total=None)
        summary = fetch_filings(
            out,
            settings,
            first,
            last,
            filter_of(settings),
            on_progress=lambda done, total: bar.update(task, completed=done, total=total),
            on_note=lambda text: bar.console.print(f"[yellow]{text}[/yellow]", highlight=False),
        )
    print_fetch(summary, out)
    status = _status(summary)
    if ingest and corpus is not None:
        status = max(status, _ingest(out, corpus, settings))
    if status:
        raise typer.Exit(status)


def print_fetch(summary: FetchSummary, out: str) -> None:
    console.print(
        f"{summary.since} to {summary.until}: {summary.listed} filings listed, {summary.taken} taken; "
        f"{summary.fetched} fetched ({summary.bytes / 1e6:.1f} MB), {summary.present} already there, "
        f"{len(summary.failed)} failed; {len(summary.days_done)} days done in {summary.seconds:.1f} s: {out}",
        highlight=False,
    )
    for key, why in list(summary.failed.items())[:SHOWN]:
        console.print(f"[yellow]not fetched:[/yellow] {key}: {why}", highlight=False)
    if len(summary.failed) > SHOWN:
        console.print(f"and {len(summary.failed) - SHOWN} more: the day records in {out}/.prism-fetch/ list each")
    if summary.days_waiting:
        days = ", ".join(str(d) for d in summary.days_waiting)
        console.print(f"no index yet for {days}: not done, the next --since last reads it again", highlight=False)


def _status(summary: FetchSummary) -> int:
    from prism.models import EXIT_CODES

    if not summary.failed:
        return 0
    return EXIT_CODES["complete_with_failures"] if summary.fetched or summary.present else EXIT_CODES["failed"]


def _ingest(target: str, corpus: str, settings) -> int:
    from producer.commands.corpus import ingest_status, print_ingest
    from producer.ingest import ingest

    source = target if not target.startswith("s3://") else target.rstrip("/") + "/"
    summary = ingest(source, corpus, settings, settings.chunking())
    print_ingest(summary, corpus)
    return ingest_status(summary)


def _day(text: str, flag: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise RunError(f"{flag} {text}: not a day; give YYYY-MM-DD") from None
