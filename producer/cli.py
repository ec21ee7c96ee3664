"""``prism``: plan and enqueue ranking runs, watch them, report on them."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from datetime import UTC, datetime
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from prism.models import PromptVariant, RankerName, RunManifest
from producer.plan import plan_run
from producer.report import RunState, cost_report, finalize, run_metrics
from workers import logs, runtime
from workers.app import make_app
from workers.embedded import embedded_worker
from workers.settings import Settings
from workers.store import RunLayout, get_model, open_store, put_model

app = typer.Typer(help="Rank financial filings for questions with an LLM fleet (the PRISM method).", no_args_is_help=True)
console = Console(stderr=True, soft_wrap=True)
SAMPLE = "bundled sample"

InputArg = Annotated[Optional[str], typer.Argument(help="JSONL input (plain or .gz): a path or s3://bucket/key. Default: the bundled sample.")]  # fmt: skip
RunIdOpt = Annotated[Optional[str], typer.Option("--run-id", help="Reuse a run id; default: a new one.")]
ResultsOpt = Annotated[Optional[str], typer.Option("--results", help="Results folder or s3://bucket/prefix (PRISM_RESULTS).")]
DocRankerOpt = Annotated[Optional[RankerName], typer.Option("--doc-ranker", help="llm or lexical (PRISM_DOC_RANKER).")]
ChunkRankerOpt = Annotated[Optional[RankerName], typer.Option("--chunk-ranker", help="llm or lexical (PRISM_CHUNK_RANKER).")]
DocPromptOpt = Annotated[Optional[PromptVariant], typer.Option("--doc-prompt", help="p1..p4 (PRISM_DOC_PROMPT).")]
ChunkPromptOpt = Annotated[Optional[PromptVariant], typer.Option("--chunk-prompt", help="p1..p4 (PRISM_CHUNK_PROMPT).")]
TopNOpt = Annotated[Optional[int], typer.Option("--top-n", help="Chunks in the final ranking (PRISM_TOP_N).")]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", help="Plan at most this many queries.")]


@app.command()
def run(
    input: InputArg = None,
    run_id: RunIdOpt = None,
    results: ResultsOpt = None,
    doc_ranker: DocRankerOpt = None,
    chunk_ranker: ChunkRankerOpt = None,
    doc_prompt: DocPromptOpt = None,
    chunk_prompt: ChunkPromptOpt = None,
    top_n: TopNOpt = None,
    limit: LimitOpt = None,
    wait: Annotated[bool, typer.Option(help="Wait for the run to finish and report.")] = True,
    timeout: Annotated[Optional[float], typer.Option(help="Stop waiting after this many seconds.")] = None,
) -> None:
    """Plan, enqueue, wait with a progress bar, write the report and print a summary."""
    settings = Settings()
    if not wait and settings.embedded:
        raise typer.BadParameter("--no-wait needs a fleet (PRISM_BROKER_URL): embedded workers stop when the command ends")
    config = settings.run_config(doc_ranker=doc_ranker, chunk_ranker=chunk_ranker, doc_prompt=doc_prompt, chunk_prompt=chunk_prompt, top_n=top_n)  # fmt: skip
    run_id = run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    results = results or settings.results
    source = input or str(files("prism").joinpath("data", "sample.jsonl.gz"))
    store = open_store(results, settings)
    logs.configure(settings.log_level if not settings.embedded else "WARNING")
    _print_settings(settings, config, input or SAMPLE, results, run_id)

    celery_app = make_app(settings)
    celery_app.set_current()
    manifest = RunManifest(
        run_id=run_id, status="planning", input=input or SAMPLE, results=results, created_at=datetime.now(UTC),
        config=config, settings=settings.masked(), code_version=_code_version(), embedded=settings.embedded,
    )  # fmt: skip
    layout = RunLayout(run_id)
    put_model(store, layout.file("manifest.json"), manifest)

    def go() -> None:
        nonlocal manifest
        started = time.monotonic()
        with console.status("planning...") as status:
            plan = plan_run(
                source, run_id, results, config, store, settings, limit,
                on_query=lambda p: status.update(f"planning: {p.documents} document and {p.chunks} chunk queries"),
            )  # fmt: skip
        counts = {"documents": plan.documents, "chunks": plan.chunks, "segments": plan.segments, "invalid_rows": plan.invalid_rows}
        manifest = manifest.model_copy(update={"status": "running", "counts": counts, "timings": {"plan_s": round(time.monotonic() - started, 3)}})  # fmt: skip
        put_model(store, layout.file("manifest.json"), manifest)
        console.print(f"planned {plan.jobs} jobs ({plan.documents} documents, {plan.chunks} chunks in {plan.segments} segments); {plan.invalid_rows} invalid rows")  # fmt: skip
        if not wait:
            typer.echo(run_id)
            return
        state = _watch(RunState(store, run_id), plan.jobs, timeout)
        manifest, cost, metrics = finalize(state, manifest, plan.jobs)
        _print_summary(manifest, cost, metrics, settings, config)

    if settings.embedded:
        runtime.use(settings)
        with embedded_worker(celery_app, settings.embedded_workers):
            go()
    else:
        go()


@app.command()
def enqueue(
    input: InputArg = None,
    run_id: RunIdOpt = None,
    results: ResultsOpt = None,
    doc_ranker: DocRankerOpt = None,
    chunk_ranker: ChunkRankerOpt = None,
    doc_prompt: DocPromptOpt = None,
    chunk_prompt: ChunkPromptOpt = None,
    top_n: TopNOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Plan and enqueue a run on the fleet; print its run id and return."""
    run(input, run_id, results, doc_ranker, chunk_ranker, doc_prompt, chunk_prompt, top_n, limit, wait=False)


@app.command()
def status(run_id: str, results: ResultsOpt = None) -> None:
    """Done, failed and pending jobs, tokens, USD and the time left."""
    store, manifest = _open_run(run_id, results)
    state = RunState(store, run_id).poll()
    planned = manifest.counts.get("documents", 0) + manifest.counts.get("chunks", 0)
    cost = cost_report(state)["total"]
    elapsed = (datetime.now(UTC) - manifest.created_at).total_seconds()
    pending = max(0, planned - state.finished)
    eta = pending * elapsed / state.finished if state.finished and pending else 0.0
    table = Table(title=f"run {run_id} ({manifest.status})")
    for column in ("done", "failed", "pending", "invalid rows", "tokens", "USD", "ETA"):
        table.add_column(column, justify="right")
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    eta_text = "-" if not pending else (f"{eta:.0f} s" if state.finished else "unknown")
    table.add_row(str(len(state.results)), str(len(state.job_failures)), str(pending), str(len(state.input_failures)), str(tokens), f"{float(cost['usd']):.4f}", eta_text)  # fmt: skip
    Console().print(table)


@app.command()
def report(run_id: str, results: ResultsOpt = None) -> None:
    """Rewrite the run's report files from what is stored now, and print the summary."""
    store, manifest = _open_run(run_id, results)
    manifest, cost, metrics = finalize(RunState(store, run_id), manifest)
    _print_summary(manifest, cost, metrics, Settings(), manifest.config)


@app.command(name="eval")
def evaluate(run_id: str, results: ResultsOpt = None) -> None:
    """NDCG@5, MRR@5 and MAP@5 of the run's rankings against the qrels of its input."""
    store, _ = _open_run(run_id, results)
    metrics = run_metrics(RunState(store, run_id).poll())
    if not metrics:
        raise typer.Exit(f"run {run_id} has no qrels to evaluate against")
    store.put(RunLayout(run_id).file("metrics.json"), json.dumps(metrics, indent=1).encode())
    Console().print(_metrics_table(metrics))
    typer.echo(json.dumps(metrics))


def _open_run(run_id: str, results: str | None):
    settings = Settings()
    store = open_store(results or settings.results, settings)
    try:
        return store, get_model(store, RunLayout(run_id).file("manifest.json"), RunManifest)
    except KeyError:
        raise typer.BadParameter(f"no run {run_id!r} in {store.uri}") from None


def _watch(state: RunState, planned: int, timeout: float | None) -> RunState:
    deadline = time.monotonic() + timeout if timeout else None
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("ranking", total=planned)
        while True:
            state.poll()
            usd = cost_report(state)["total"]["usd"]
            failed = len(state.job_failures)
            progress.update(bar, completed=state.finished, description=f"ranking (failed {failed}, ${float(usd):.4f})")
            if state.finished >= planned or (deadline and time.monotonic() > deadline):
                return state
            time.sleep(0.5)


def _print_settings(settings: Settings, config, input_name: str, results: str, run_id: str) -> None:
    mode = "embedded (in-process workers, no broker)" if settings.embedded else "fleet"
    console.print(f"[bold]prism run[/bold] {run_id}: {mode}; input {input_name}; results {results}")
    console.print(f"rankers: documents {config.doc_ranker} ({config.doc_prompt}), chunks {config.chunk_ranker} ({config.chunk_prompt}); models {config.models}")  # fmt: skip
    logs.get().info("settings", settings=settings.masked(), config=config.model_dump(mode="json"))


def _metrics_table(metrics: dict) -> Table:
    table = Table(title="metrics (k = 5)")
    for column in ("task", "queries", "NDCG@5", "MRR@5", "MAP@5", "missing"):
        table.add_column(column, justify="right")
    for task, m in metrics.items():
        table.add_row(task, str(m["queries"]), f"{m['ndcg@5']:.4f}", f"{m['mrr@5']:.4f}", f"{m['map@5']:.4f}", str(m["missing"]))
    return table


def _print_summary(manifest: RunManifest, cost: dict, metrics: dict, settings: Settings, config) -> None:
    out, c, total = Console(soft_wrap=True), manifest.counts, cost["total"]
    out.print(f"\n[bold]run {manifest.run_id}: {manifest.status}[/bold] in {manifest.timings.get('wall_s', 0):.1f} s")
    out.print(f"queries: {c.get('done', 0)} done, {c.get('failed', 0)} failed, {c.get('pending', 0)} pending; {c.get('invalid_rows', 0)} invalid input rows")  # fmt: skip
    unpriced = f" + {total['unpriced_calls']} unpriced call(s)" if total["unpriced_calls"] else ""
    out.print(f"LLM: {total['calls']} calls, {total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens, USD {float(total['usd']):.4f}{unpriced}")  # fmt: skip
    if metrics:
        out.print(_metrics_table(metrics))
    out.print(f"results, manifest, cost.json and report.md: {manifest.results.rstrip('/')}/runs/{manifest.run_id}/")
    if "llm" not in (config.doc_ranker, config.chunk_ranker):
        out.print(
            "[yellow]No LLM was used:[/yellow] rankings come from the $0 lexical ranker (BM25). To rank with an LLM set "
            "OPENAI_API_KEY (or PRISM_LLM_BASE_URL for any OpenAI-compatible server); to run on a fleet set "
            "PRISM_BROKER_URL and PRISM_RESULTS=s3://bucket/prefix and start workers with `celery -A workers.app worker`."
        )


def _code_version() -> str:
    text = version("prism-fleet")
    try:
        here = Path(__file__).resolve().parent
        sha = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True, timeout=5)
        if sha.returncode == 0 and sha.stdout.strip():
            text += f"+{sha.stdout.strip()}"
    except OSError:
        pass
    return text


def main() -> None:
    app()
