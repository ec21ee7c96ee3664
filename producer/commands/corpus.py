"""`prism ingest` and `prism corpus ls`: filings into a corpus, and what a corpus holds."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any

import typer

from producer.commands.common import console
from producer.flags import flags, settings_with
from producer.spec import RunError

if TYPE_CHECKING:
    from workers.corpus import IngestSummary

corpus_app = typer.Typer(help="What a corpus holds.", no_args_is_help=True)
CorpusArg = Annotated[str, typer.Option("--corpus", help="The corpus: a folder or s3://bucket/prefix.")]
FILING_FILES = ".pdf, .htm, .html, .txt, .nc, .jsonl, .jsonl.gz, or archives of them: .tar, .tar.gz, .tgz, .zip"
SHOWN = 10  # failures and guessed identities printed; the corpus catalogue keeps every one


@flags("ingest")
def ingest(
    source: Annotated[
        str, typer.Argument(help="A filing, an archive of them, a folder of them, or an s3:// prefix ending in '/'.")
    ],
    corpus: CorpusArg,
    meta: Annotated[
        str | None, typer.Option("--meta", help="A metadata JSONL (company, form type, period) for files without one.")
    ] = None,
    index: Annotated[
        str | None,
        typer.Option(
            "--index",
            help="An EDGAR index (form.idx, company.idx, master.idx): archive members are taken by its rows, unread.",
        ),
    ] = None,
    **options: Any,
) -> None:
    """Ingest filings (PDF, HTML, text, EDGAR .txt and .nc submissions, benchmark rows) into a
    corpus, once per version: an unchanged filing is a no-op, a changed one a new version; a
    file whose size, time and metadata are as last ingested is not read again. Archives (.tar,
    .tar.gz, .zip) are read where they lie, one task per member, filtered by --forms, --ciks,
    --question-set and --index. One fleet task per file (in this process when no broker is
    configured). A filing that cannot be read is a stored failure; the rest go on; while the file
    is unchanged it is named again, not read again. Exits 1 when no filing could be ingested, 3
    when some could not."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from producer.archives import filter_of
    from producer.ingest import ingest as ingest_files

    settings = settings_with(options)
    chosen = filter_of(settings, index)
    _check_paths(source, meta, corpus)
    columns = (TextColumn("ingesting files"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("ingest", total=None)
        summary = ingest_files(
            source,
            corpus,
            settings,
            settings.chunking(),
            meta,
            chosen,
            on_progress=lambda done, total: bar.update(task, completed=done, total=total),
            on_note=lambda text: bar.console.print(f"[yellow]{text}[/yellow]"),
        )
    print_ingest(summary, corpus)
    if not summary.sources and not summary.left_out:
        raise RunError(f"{source}: no filings ({FILING_FILES}) found")
    if status := ingest_status(summary):
        raise typer.Exit(status)


def _check_paths(source: str, meta: str | None, corpus: str) -> None:
    if not source.startswith("s3://") and not Path(source).exists():
        raise RunError(f"{source}: no such file or folder")
    if meta is not None and not Path(meta).is_file():
        raise RunError(f"--meta {meta}: no such file")
    if not corpus.startswith("s3://") and Path(corpus).is_file():
        raise RunError(f"--corpus {corpus}: is a file; give a folder or an s3:// URI")


def ingest_status(summary: IngestSummary) -> int:
    """0 when every file gave its filings; 3 when some did not; 1 when none did."""
    from prism.models import EXIT_CODES

    if not summary.failed:
        return 0
    some = summary.ingested or summary.unchanged or summary.new_versions
    return EXIT_CODES["complete_with_failures"] if some else EXIT_CODES["failed"]


def print_ingest(summary: IngestSummary, corpus: str) -> None:
    """What an ingest did: counts, then the failures, guessed identities and files not read."""
    console.print(
        f"{summary.sources} sources: {summary.ingested} filings ingested, {summary.new_versions} new versions, "
        f"{summary.unchanged} unchanged ({summary.skipped} files not read again), {summary.failed} failed"
        f"{f', {summary.left_out} archive members left out by the filter' if summary.left_out else ''}; "
        f"{summary.pages} pages ({summary.empty_pages} empty), {summary.chunks} chunks, {summary.tokens} tokens "
        f"in {summary.seconds:.1f} s: {corpus}"
    )
    for failure in summary.failures[:SHOWN]:
        console.print(f"[yellow]not ingested:[/yellow] {failure}", highlight=False)
    if len(summary.failures) > SHOWN:
        console.print(f"and {len(summary.failures) - SHOWN} more: the corpus catalogue keeps every failure")
    for fid, fields in list(summary.guessed.items())[:SHOWN]:
        console.print(
            f"[yellow]identity guessed:[/yellow] {fid}: {fields} (a metadata file overrides)", highlight=False
        )
    if len(summary.guessed) > SHOWN:
        console.print(f"and {len(summary.guessed) - SHOWN} more filings with guessed fields (their meta.guessed)")
    if summary.unsupported:
        n, shown = len(summary.unsupported), ", ".join(PurePosixPath(u).name for u in summary.unsupported[:5])
        more = f" and {n - 5} more" if n > 5 else ""
        console.print(
            f"{n} file{'s' if n > 1 else ''} not ingested (not {FILING_FILES}): {shown}{more}",
            highlight=False,
        )


def sample(
    target: Annotated[Path, typer.Argument(help="A folder to copy them into (made if missing).")],
) -> None:
    """Copy the bundled sample, seven real EDGAR filings and 22 questions about them, into a
    folder: filings/ to ingest and questions.jsonl to run, to try prism on before your own."""
    from producer.sample import copy_sample

    if target.exists() and not target.is_dir():
        raise RunError(f"{target}: is a file; give a folder")
    filings, questions = copy_sample(target)
    console.print(f"{filings} filings in {target / 'filings'}, the question set in {questions}", highlight=False)


@corpus_app.command("ls")
def corpus_ls(
    corpus: CorpusArg,
    cik: Annotated[str | None, typer.Option("--cik", help="Only this company's filings, by CIK.")] = None,
    company: Annotated[
        str | None,
        typer.Option("--company", help="Only this company's filings: a name, ticker or CIK, as a scope names it."),
    ] = None,
    form: Annotated[str | None, typer.Option("--form", help="Only these forms, comma-separated: 10-K,10-Q.")] = None,
    since: Annotated[
        datetime | None, typer.Option("--since", formats=["%Y-%m-%d"], help="Only filings filed on or after this day.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most this many lines.")] = None,
) -> None:
    """A corpus's filings, streamed: the id a question's qrels name, with its company, CIK, form,
    period, filing date, accession number and pages, and the identity fields that were guessed.
    --cik and --company read that company's filings alone; without them every filing is listed."""
    from prism.corpus.filters import forms_of
    from producer.listing import list_filings

    settings = settings_with({})
    scope = cik or company
    shown = list_filings(corpus, settings, scope, forms_of(form), since.date() if since else None, limit, typer.echo)
    filtered = bool(scope or form or since or limit)
    if not shown:
        raise RunError(f"--corpus {corpus}: no filings {'match' if filtered else 'there'}")
    console.print(f"{shown} filings {'listed from' if filtered else 'in'} {corpus}")
    if not filtered and (failed := failure_count(corpus, settings)):
        console.print(f"{failed} sources gave no filing (prism corpus failures says why)")


@corpus_app.command("failures")
def corpus_failures(corpus: CorpusArg) -> None:
    """The sources of a corpus that gave no filing, and why: one tab-separated line each."""
    from producer.spec import open_corpus

    failures = open_corpus(corpus, settings_with({})).catalog.failures()
    for source, row in failures.items():
        typer.echo(f"{source}\t{row.reason}")
    console.print(f"{len(failures)} sources gave no filing in {corpus}")


def failure_count(corpus: str, settings: Any) -> int:
    from producer.spec import open_corpus

    return len(open_corpus(corpus, settings).catalog.failures())


@corpus_app.command("upgrade")
def corpus_upgrade(corpus: CorpusArg) -> None:
    """Convert a corpus kept in the format before its catalogue (one manifest.json) into the
    catalogue's tables, once: nothing is ingested again, and runs keep their job ids."""
    from workers.corpus import Corpus
    from workers.store import open_store
    from workers.upgrade import upgrade

    filings = upgrade(Corpus(open_store(corpus, settings_with({}))))
    console.print(
        f"{corpus}: nothing to upgrade"
        if filings is None
        else f"{filings} filings moved into the catalogue of {corpus}"
    )


@corpus_app.command("compact")
def corpus_compact(
    corpus: CorpusArg,
    vacuum_hours: Annotated[
        int, typer.Option("--vacuum-hours", min=168, help="Delete files no catalogue version of this many hours needs.")
    ] = 168,
) -> None:
    """Merge the catalogue's small files (each ingest appends a few): reads stay quick. No row is
    changed or dropped; files that only versions older than --vacuum-hours need are deleted."""
    from producer.spec import open_corpus

    done = open_corpus(corpus, settings_with({})).catalog.compact(vacuum_hours)
    for table, counts in done.items():
        console.print(
            f"{table}: {counts['removed']} files merged into {counts['added']}, {counts['deleted']} old files deleted"
        )
