"""What a command prints about a run: the lines when it starts, the summary when it ends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from workers import logs
from workers.settings import Settings, named

if TYPE_CHECKING:
    from producer.reader import RunEnd
    from producer.spec import RunSpec

NO_LLM = {"prior": "the learned filing-type prior", "lexical": "BM25", "financial": "the financial retriever"}


def print_start(console: Console, settings: Settings, spec: RunSpec, input_name: str) -> None:
    config = spec.config
    mode = "embedded (in-process workers, no broker)" if settings.embedded else "fleet"
    console.print(f"[bold]prism run[/bold] {spec.run_id}: {mode}; input {input_name}; results {spec.results}")
    console.print(
        f"rankers: documents {config.doc_ranker} ({config.doc_prompt}), chunks {config.chunk_ranker} "
        f"({config.chunk_prompt}); models {config.models}"
    )
    # The whole of it is in the run's manifest.json (secrets masked); the terminal gets the lines above.
    logs.get().debug("settings", settings=settings.masked(), config=config.model_dump(mode="json"))


def metrics_table(metrics: dict) -> Table:
    table = Table(title="metrics (k = 5)")
    for column in ("task", "queries", "NDCG@5", "MRR@5", "MAP@5", "missing"):
        table.add_column(column, justify="right")
    for task, m in metrics.items():
        table.add_row(
            task, str(m["queries"]), f"{m['ndcg@5']:.4f}", f"{m['mrr@5']:.4f}", f"{m['map@5']:.4f}", str(m["missing"])
        )
    return table


def print_summary(end: RunEnd) -> None:
    """The run's end: its status, counts, spend, metrics and where its files are."""
    from prism.runs.outcomes import usd_text

    manifest, cost, metrics = end.manifest, end.cost, end.metrics
    out, c, total = Console(soft_wrap=True), manifest.counts, cost["total"]
    why = f" ({manifest.error})" if manifest.error else ""
    paused = manifest.timings.get("provider_unavailable_s")
    waited = f" ({paused:.0f} s of it with the LLM provider unavailable)" if paused else ""
    out.print(
        f"\n[bold]run {manifest.run_id}: {manifest.status}[/bold]{why} in {manifest.timings.get('wall_s', 0):.1f} s{waited}"
    )
    out.print(
        f"queries: {c.get('done', 0)} done ({c.get('reused', 0)} reused), {c.get('failed', 0)} failed, "
        f"{c.get('pending', 0)} pending; {c.get('invalid_rows', 0)} invalid input rows"
    )
    out.print(
        f"LLM: {total['calls']} calls ({total['cached_calls']} from the cache), {total['prompt_tokens']} prompt "
        f"({total.get('cached_tokens', 0)} cached at the provider) + {total['completion_tokens']} completion tokens, "
        f"USD {usd_text(total)}"
    )
    for check in manifest.prompt_checks:
        if check.dropped is not False:
            out.print(f"[bold red]warning:[/bold red] {check.text()}", highlight=False)
    if savings := cost.get("savings"):
        usd = savings["usd_saved_estimate"]
        saved = "no LLM document call in this run to price it by" if usd is None else f"about ${float(usd):.4f}"
        out.print(
            f"documents: {savings['llm_calls_avoided']} answered by the prior, {savings['llm_calls_made']} by the "
            f"LLM; saved against LLM-only: {saved}"
        )
    _print_metrics(out, metrics)
    results = manifest.results if manifest.results.startswith("s3://") else str(Path(manifest.results).resolve())
    folder = f"{results.rstrip('/')}/runs/{manifest.run_id}/"
    if manifest.corpus:
        out.print(f"evidence table: {folder}evidence.csv (and evidence.parquet)", highlight=False)
    out.print(f"results, manifest, cost.json and report.md: {folder}", highlight=False)
    _print_no_llm(out, end)


def _print_metrics(out: Console, metrics: dict) -> None:
    if ranked := {k: v for k, v in metrics.items() if "ndcg@5" in v}:
        out.print(metrics_table(ranked))
    if asked := metrics.get("questions"):
        shown = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in asked.items() if not isinstance(v, dict)
        )
        out.print(f"questions: {shown}")
    if evidence := metrics.get("evidence"):
        out.print(
            f"evidence ({evidence['queries']} queries): precision {evidence['precision']:.3f}, recall "
            f"{evidence['recall']:.3f}, answer EM {evidence.get('exact_match', float('nan')):.3f}, token F1 "
            f"{evidence.get('token_f1', float('nan')):.3f}"
        )


def _print_no_llm(out: Console, end: RunEnd) -> None:
    config = end.manifest.config
    if config.uses_llm("documents") or config.uses_llm("chunks"):
        return
    out.print(
        f"[yellow]No LLM was used:[/yellow] documents were ranked by {NO_LLM.get(config.doc_ranker, config.doc_ranker)} "
        f"and chunks by {NO_LLM.get(config.chunk_ranker, config.chunk_ranker)}, at $0. To rank with an LLM set "
        f"OPENAI_API_KEY (or {named('llm_base_url')} for any OpenAI-compatible server); to run on a fleet set "
        f"{named('broker_url')} and {named('results', 's3://bucket/prefix')} and start workers with "
        "`celery -A workers.app worker`."
    )
