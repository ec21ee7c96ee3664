"""`prism status`, `prism report` and `prism eval`: what a run has done, read from its store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from producer.commands.common import console, open_reader
from producer.flags import flags, settings_with
from producer.spec import RunError
from producer.summary import metrics_table, print_summary

if TYPE_CHECKING:
    from prism.models import RunManifest
    from producer.reader import RunReader
    from workers.runstate import RunState

RunIds = Annotated[list[str], typer.Argument(help="One run, or several to compare.")]


@flags("status")
def status(run_id: str, **options: Any) -> None:
    """Done, failed and pending jobs, tokens, USD and the time left."""
    from prism.runs.outcomes import cost_report, usd_text
    from workers.batches import batch_summary
    from workers.circuit import outage_text
    from workers.slots import slots_text

    runs = open_reader(settings_with(options))
    state, manifest = runs.refresh(run_id, None)
    state.poll()
    planned = runs.expected(state.store, manifest)
    cost = cost_report(state)["total"]
    elapsed = (datetime.now(UTC) - manifest.created_at).total_seconds()
    running = manifest.status in ("planning", "running")
    pending = max(0, planned - state.finished)
    eta = pending * elapsed / state.finished if state.finished and pending else 0.0
    table = Table(title=f"run {run_id} ({manifest.status}{f': {manifest.error}' if manifest.error else ''})")
    for column in ("done", "failed", "skipped (budget)", "pending", "invalid rows", "tokens", "USD", "ETA"):
        table.add_column(column, justify="right")
    eta_text = "-" if not (pending and running) else (f"{eta:.0f} s" if state.finished else "unknown")
    counts = (state.results, state.job_failures, state.skipped)
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    table.add_row(
        *(str(len(c)) for c in counts),
        str(pending),
        str(len(state.input_failures)),
        str(tokens),
        usd_text(cost),
        eta_text,
    )
    Console().print(table)
    outages, slots = runs.fleet_now() if running else ([], {})
    if outages:
        Console().print(f"{outage_text(outages)}, {pending} jobs waiting", highlight=False)
    if slots_text(slots):
        Console().print(slots_text(slots), highlight=False)
    if manifest.config.via == "batch":
        Console().print(batch_summary(state.store, run_id), highlight=False)


@flags("report")
def report(run_ids: RunIds, **options: Any) -> None:
    """Rewrite each run's report (markdown and PNG plots, in the run's folder) from what is
    stored now; for several runs, also a comparison in reports/<time>/ (mean, SD, CV, 95% CI,
    Welch's t-test per configuration)."""
    from producer import analysis

    runs = open_reader(settings_with(options))
    compared, store = {}, None
    for run_id in run_ids:
        state, manifest = runs.refresh(run_id, None)
        store = state.store
        end = runs.finalize(state, manifest, manifest.status == "budget_exhausted")
        compared[run_id] = (end.manifest, end.summary)
        if len(run_ids) == 1:
            print_summary(end)
    if len(run_ids) > 1 and store is not None:
        folder = analysis.write_comparison(store, compared)
        console.print(f"written to {store.uri}/{folder}/")


@flags("eval")
def evaluate(run_ids: RunIds, **options: Any) -> None:
    """NDCG@5, MRR@5 and MAP@5 per task and over all queries (evidence precision/recall and
    answer EM/F1 where present); for several runs, statistics per configuration and Welch's
    t-test. The last line is JSON. Reads the run, writes nothing (`prism report` rewrites its files)."""
    from prism.runs.outcomes import summarize
    from producer import analysis

    runs, compared = open_reader(settings_with(options)), {}
    for run_id in run_ids:
        state, manifest = runs.open_run(run_id, None)
        if manifest.corpus:  # a question set: its evidence against the qrels over (filing, page)
            typer.echo(json.dumps(_evidence_metrics(runs, state, manifest)))
            continue
        summary = summarize(state.poll())
        if not summary["metrics"]:
            raise RunError(f"run {run_id} has no qrels to evaluate against")
        compared[run_id] = (manifest, summary)
        Console().print(metrics_table({k: v for k, v in summary["metrics"].items() if "ndcg@5" in v}))
    if len(compared) <= 1:
        if compared:
            typer.echo(json.dumps(next(iter(compared.values()))[1]["metrics"]))
        return
    comparison = analysis.compare(compared)
    Console(soft_wrap=True).print(analysis.markdown(compared, comparison))
    typer.echo(json.dumps(comparison))


def _evidence_metrics(runs: RunReader, state: RunState, manifest: RunManifest) -> dict:
    """A question-set run's evidence metrics (filing_top1, evidence recall@5 and NDCG@5), as
    they stand now (`prism report` writes them into the run's evidence_metrics.json)."""
    from producer import evidence
    from workers.corpus import Corpus

    assert manifest.corpus is not None
    state.poll()
    corpus = Corpus(runs.store(manifest.corpus))
    _, metrics = evidence.rows_of(state, corpus, compared=False)
    if not metrics["judged"]:
        raise RunError(
            f"run {manifest.run_id}: none of its {metrics['questions']} questions has qrels over a filing of its corpus"
        )
    table = Table(title=f"run {manifest.run_id}: evidence (k = 5)")
    for column in ("questions", "judged", "filing top-1", "evidence recall@5", "evidence NDCG@5"):
        table.add_column(column, justify="right")
    table.add_row(
        *(str(metrics[k]) for k in ("questions", "judged")),
        *(f"{metrics[k]:.4f}" for k in ("filing_top1", "evidence_recall@5", "evidence_ndcg@5")),
    )
    Console().print(table)
    return metrics
