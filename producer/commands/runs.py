"""`prism runs` and `prism runs prune`: the runs a results store holds, and removing the old ones
without breaking a night (prism/runs/retention.py decides, workers/retention.py removes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from producer.commands.common import console, open_reader
from producer.flags import flags, settings_with
from producer.spec import RunError

if TYPE_CHECKING:
    from prism.runs.retention import RunEntry
    from workers.settings import Settings

runs_app = typer.Typer(help="The runs a results store holds, and removing old ones.", invoke_without_command=True)


@runs_app.callback()
@flags("runs")
def runs(ctx: typer.Context, **options: Any) -> None:
    """The runs in the results store, newest first: id, status, corpus, started, questions, USD."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_with(options)
    entries = _settled(settings)
    typer.echo("\t".join(("run", "status", "corpus", "started", "questions", "usd")))
    for run in entries:
        started = run.created_at.isoformat(timespec="seconds") if run.created_at.year > 1 else "-"
        usd = "unknown" if run.usd is None else f"{run.usd:.4f}"
        typer.echo("\t".join((run.run_id, run.status, run.corpus or "-", started, str(run.questions), usd)))
    console.print(f"{len(entries)} runs in {settings.results}")


@runs_app.command()
@flags("prune")
def prune(
    run_ids: Annotated[
        list[str] | None, typer.Argument(help="Runs to remove, by id (none: by --keep and --older-than).")
    ] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="Keep the newest N runs (at least 1).")] = None,
    older_than: Annotated[
        float | None, typer.Option("--older-than", help="Remove only runs started more than DAYS days ago.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")] = False,
    **options: Any,
) -> None:
    """Remove old runs: their folders, then the shared results no kept run holds. The newest
    complete run over each corpus (a `--new` night starts from it) is always kept, and nothing
    is removed while a run is planning or running. A later night still reuses at $0 whatever a
    kept run holds. Exits 2, removing nothing, for a run that does not exist, --keep 0,
    --older-than below 0 or a run in progress."""
    from prism.runs.retention import PruneError, verdict
    from workers.cache import remove_expired
    from workers.retention import prune as remove
    from workers.store import open_store

    settings = settings_with(options)
    entries = _settled(settings)
    try:
        decided = verdict(entries, datetime.now(UTC), keep, older_than, run_ids or [])
    except PruneError as err:
        raise RunError(str(err)) from None
    for run in decided.pruned:
        typer.echo(
            f"{'would remove' if dry_run else 'removing'}\t{run.run_id}\t{run.status}\t{run.created_at:%Y-%m-%d}"
        )
    kept = ", ".join(f"{r.run_id} ({decided.reasons[r.run_id]})" for r in decided.kept[:5])
    more = f" and {len(decided.kept) - 5} more" if len(decided.kept) > 5 else ""
    console.print(f"keeping {len(decided.kept)} run(s){': ' + kept + more if kept else ''}")
    if dry_run or not decided.pruned:
        return
    done = remove(open_store(settings.results, settings), decided)
    expired = remove_expired(open_store(settings.cache_uri or settings.results, settings), settings.cache_ttl_s)
    console.print(
        f"removed {done.runs} run(s) ({done.objects} objects), {done.shared_results} shared results no kept "
        f"run holds, {done.index_entries} old index entries and {expired} expired cached answers"
    )


def _settled(settings: Settings) -> list[RunEntry]:
    """The runs, with any whose producer is gone settled first (interrupted, not in progress)."""
    from prism.runs.retention import IN_PROGRESS
    from workers.retention import run_entries
    from workers.store import open_store

    store = open_store(settings.results, settings)
    entries = run_entries(store)
    if not any(r.status in IN_PROGRESS for r in entries):
        return entries
    reader = open_reader(settings)
    for run in entries:
        if run.status in IN_PROGRESS:
            reader.refresh(run.run_id, settings.results)
    return run_entries(store)
