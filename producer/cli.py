"""``prism``: plan and enqueue ranking runs, watch them, report on them."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path
from typing import Annotated

import redis
import typer
from amqp.exceptions import ChannelError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from prism.models import ChunkRankerName, DocRankerName, Failure, PromptVariant, RunManifest, Usage
from prism.pricing import PriceTable
from producer.plan import Plan, RunSpec, plan_run
from producer.report import RunState, cost_report, finalize
from workers import logs, runtime
from workers.app import make_app
from workers.budget import RunBudget
from workers.embedded import embedded_worker
from workers.metrics import FleetCollector
from workers.priors import PACKAGED, read_prior, with_examples, with_prior
from workers.settings import Settings
from workers.store import RunLayout, get_model, open_input, open_store, put_model

app = typer.Typer(
    help="Rank financial filings for questions with an LLM fleet (the PRISM method).", no_args_is_help=True
)
console = Console(stderr=True, soft_wrap=True)
SAMPLE = "bundled sample"

InputArg = Annotated[
    str | None,
    typer.Argument(help="JSONL input (plain or .gz): a path or s3://bucket/key. Default: the bundled sample."),
]
RunIdOpt = Annotated[str | None, typer.Option("--run-id", help="Reuse a run id; default: a new one.")]
ResultsOpt = Annotated[
    str | None, typer.Option("--results", help="Results folder or s3://bucket/prefix (PRISM_RESULTS).")
]
DocRankerOpt = Annotated[
    DocRankerName | None,
    typer.Option("--doc-ranker", help="llm, lexical, prior, cascade or fuse (PRISM_DOC_RANKER)."),
]
ChunkRankerOpt = Annotated[
    ChunkRankerName | None,
    typer.Option("--chunk-ranker", help="llm, lexical, hybrid, a1-a4 or evidence (PRISM_CHUNK_RANKER)."),
]
DocPromptOpt = Annotated[PromptVariant | None, typer.Option("--doc-prompt", help="p1..p4 (PRISM_DOC_PROMPT).")]
ChunkPromptOpt = Annotated[PromptVariant | None, typer.Option("--chunk-prompt", help="p1..p4 (PRISM_CHUNK_PROMPT).")]
TopNOpt = Annotated[int | None, typer.Option("--top-n", help="Chunks in the final ranking (PRISM_TOP_N).")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Plan at most this many queries.")]


BudgetOpt = Annotated[
    Decimal | None, typer.Option("--budget-usd", help="Stop the run at this spend (PRISM_BUDGET_USD).")
]
WaitOpt = Annotated[bool, typer.Option(help="Wait for the run to finish and report.")]
TimeoutOpt = Annotated[float | None, typer.Option(help="Stop waiting after this many seconds.")]


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
    budget_usd: BudgetOpt = None,
    icl_documents: Annotated[
        int | None, typer.Option(help="In-context examples per document prompt (PRISM_ICL_DOCUMENTS).")
    ] = None,
    icl_chunks: Annotated[
        int | None, typer.Option(help="In-context examples per chunk prompt (PRISM_ICL_CHUNKS).")
    ] = None,
    prefilter: Annotated[
        int | None,
        typer.Option(help="Keep this many chunks per filing by BM25 + dense fusion (PRISM_PREFILTER_KEEP)."),
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Rank every query, even those an earlier run ranked with the same job id.")
    ] = False,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = None,
) -> None:
    """Plan, enqueue, wait with a progress bar, write the report and print a summary.

    INPUT is a JSONL file, or a folder or s3:// prefix (ending in '/') of them. A run id that
    already has results ranks only what it is missing.
    """
    settings = Settings()
    if icl_documents is not None or icl_chunks is not None:
        settings = settings.model_copy(
            update={
                "icl_documents": icl_documents or settings.icl_documents,
                "icl_chunks": icl_chunks or settings.icl_chunks,
            }
        )
    config = settings.run_config(
        doc_ranker=doc_ranker,
        chunk_ranker=chunk_ranker,
        doc_prompt=doc_prompt,
        chunk_prompt=chunk_prompt,
        top_n=top_n,
        prefilter_keep=prefilter,
    )
    config = with_examples(with_prior(config, settings), settings)
    spec = RunSpec(
        run_id=run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3),
        input=input or str(files("prism").joinpath("data", "sample.jsonl.gz")),
        results=results or settings.results,
        config=config,
        budget_usd=budget_usd if budget_usd is not None else settings.budget_usd,
        reuse=not fresh,
    )
    manifest = RunManifest(
        run_id=spec.run_id,
        status="planning",
        input=spec.input,
        results=spec.results,
        created_at=datetime.now(UTC),
        config=config,
        settings=settings.masked(),
        code_version=_code_version(),
        embedded=settings.embedded,
        budget_usd=spec.budget_usd,
        reuse=spec.reuse,
    )
    _execute(spec, manifest, settings, limit, wait, timeout, input_name=input or SAMPLE)


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
    budget_usd: BudgetOpt = None,
) -> None:
    """Plan and enqueue a run on the fleet; print its run id and return."""
    run(
        input, run_id, results, doc_ranker, chunk_ranker, doc_prompt, chunk_prompt, top_n, limit, budget_usd, wait=False
    )


icl_app = typer.Typer(
    help="In-context examples: the FAISS store of training questions and their rankings.", no_args_is_help=True
)
app.add_typer(icl_app, name="icl")


@icl_app.command("build")
def icl_build(
    input: Annotated[str, typer.Argument(help="Training rows with qrels (document or chunk rows).")],
    out: Annotated[str, typer.Option("--out", help="Folder or s3:// prefix to write the store to.")],
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="Files whose rows must not become examples (evaluation rows)."),
    ] = None,
    embedder_name: Annotated[
        str | None, typer.Option("--embedder", help="hashed, minilm, or an embeddings model (PRISM_EMBEDDER).")
    ] = None,
) -> None:
    """Embed every training question with its gold ranking into a FAISS index, saved as plain
    files with a checksum. API embeddings go through the gateway and are priced."""
    from prism.embeddings import embedder as make_embedder
    from prism.icl import ExampleStore
    from prism.llm import recording

    settings = Settings()
    held_out = [q for path in exclude or [] for q in _read(path, settings)]
    ids, questions = {q.id for q in held_out}, {q.question for q in held_out}
    rows = [q for q in _read(input, settings) if q.id not in ids and q.question not in questions]
    name = embedder_name or settings.embedder
    with recording() as calls:
        store = ExampleStore.build(rows, make_embedder(name, runtime.use(settings).gateway))
    target = open_store(out, settings)
    for file, data in store.to_files().items():
        target.put(file, data)
    usd = sum(c.usd or 0 for c in calls)
    console.print(
        f"{store.meta['count']} examples ({len(held_out)} held-out rows excluded), {name} embeddings of {store.meta['dim']} dimensions, {len(calls)} API calls, USD {float(usd):.4f}: {out}"
    )


@app.command()
def resume(
    run_id: str,
    results: ResultsOpt = None,
    budget_usd: BudgetOpt = None,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = None,
) -> None:
    """Enqueue what a run is missing (lost jobs, or those its budget stopped) and wait for it.
    The input and the config are the run's own; --budget-usd raises its cap."""
    settings = Settings()
    store, manifest = _open_run(run_id, results)
    layout = RunLayout(run_id)
    for key in list(store.keys(f"{layout.base}/failures/")):
        if layout.query_id(key).startswith("skipped-"):
            store.delete(key)
    budget = budget_usd if budget_usd is not None else manifest.budget_usd
    if budget is not None and settings.shared_redis:
        RunBudget(redis.Redis.from_url(settings.shared_redis), run_id, budget).reopen()
    spec = RunSpec(run_id, manifest.input, manifest.results, manifest.config, budget, manifest.reuse)
    manifest = manifest.model_copy(update={"budget_usd": budget, "finished_at": None})
    _execute(spec, manifest, settings, None, wait, timeout, input_name=manifest.input)


def _execute(
    spec: RunSpec,
    manifest: RunManifest,
    settings: Settings,
    limit: int | None,
    wait: bool,
    timeout: float | None,
    input_name: str,
) -> None:
    if not wait and settings.embedded:
        raise typer.BadParameter(
            "--no-wait needs a fleet (PRISM_BROKER_URL): embedded workers stop when the command ends"
        )
    budget = _check_budget(spec, settings)
    store = open_store(spec.results, settings)
    logs.configure(settings.log_level if not settings.embedded else "WARNING")
    _print_settings(settings, spec.config, input_name, spec.results, spec.run_id)
    celery_app = make_app(settings)
    celery_app.set_current()
    layout = RunLayout(spec.run_id)
    put_model(store, layout.file("manifest.json"), manifest)
    budget_spent = budget.exhausted if budget else (lambda: False)

    def plan() -> Plan:
        started = time.monotonic()
        with console.status("planning...") as status:
            plan = plan_run(
                spec,
                store,
                settings,
                limit,
                budget_spent,
                on_query=lambda p: status.update(f"planning: {p.documents} document and {p.chunks} chunk queries"),
            )
        console.print(
            f"planned {plan.queries} queries ({plan.documents} documents, {plan.chunks} chunks): enqueued {plan.enqueued} "
            f"({plan.segments} segments), already done {plan.already_done}, reused {plan.reused}, "
            f"left pending {plan.not_enqueued}; {plan.invalid_rows} invalid rows"
        )
        nonlocal manifest
        counts = {
            "documents": plan.documents,
            "chunks": plan.chunks,
            "segments": plan.segments,
            "invalid_rows": plan.invalid_rows,
        }
        manifest = manifest.model_copy(
            update={
                "status": "running",
                "counts": counts,
                "timings": manifest.timings | {"plan_s": round(time.monotonic() - started, 3)},
            }
        )
        put_model(store, layout.file("manifest.json"), manifest)
        return plan

    def go() -> None:
        nonlocal manifest
        first = plan()
        if not wait:
            typer.echo(spec.run_id)
            return
        state, requeues = _watch(RunState(store, spec.run_id), first, settings, celery_app, timeout, plan)
        manifest = manifest.model_copy(update={"requeues": manifest.requeues + requeues})
        manifest, cost, metrics = finalize(state, manifest, budget_spent())
        _print_summary(manifest, cost, metrics, spec.config)

    if settings.embedded:
        runtime.use(settings)
        with embedded_worker(celery_app, settings.embedded_workers):
            go()
    else:
        go()


def _check_budget(spec: RunSpec, settings: Settings) -> RunBudget | None:
    if spec.budget_usd is None:
        return None
    if not settings.shared_redis:
        raise typer.BadParameter("a run budget needs Redis: set PRISM_BROKER_URL (or PRISM_REDIS_URL)")
    prices = PriceTable.load(settings.prices_file)
    for stage in spec.config.paid_stages():
        model = spec.config.models[stage]
        if prices.usd(model, Usage(prompt_tokens=1000)) is None:
            raise typer.BadParameter(
                f"model {model!r} has no price, so a budget cannot be kept; add it to PRISM_PRICES_FILE"
            )
    return RunBudget(redis.Redis.from_url(settings.shared_redis), spec.run_id, spec.budget_usd)


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
    for column in ("done", "failed", "skipped (budget)", "pending", "invalid rows", "tokens", "USD", "ETA"):
        table.add_column(column, justify="right")
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    eta_text = "-" if not pending else (f"{eta:.0f} s" if state.finished else "unknown")
    table.add_row(
        str(len(state.results)),
        str(len(state.job_failures)),
        str(len(state.skipped)),
        str(pending),
        str(len(state.input_failures)),
        str(tokens),
        f"{float(cost['usd']):.4f}",
        eta_text,
    )
    Console().print(table)


@app.command()
def report(
    run_ids: Annotated[list[str], typer.Argument(help="One run, or several to compare.")], results: ResultsOpt = None
) -> None:
    """Rewrite each run's report (markdown and PNG plots, in the run's folder) from what is
    stored now; for several runs, also a comparison in reports/<time>/ (mean, SD, CV, 95% CI,
    Welch's t-test per configuration)."""
    from producer import analysis

    runs, store = {}, None
    for run_id in run_ids:
        store, manifest = _open_run(run_id, results)
        state = RunState(store, run_id)
        manifest, cost, metrics = finalize(state, manifest, manifest.status == "budget_exhausted")
        runs[run_id] = (manifest, analysis.summarize(state))
        if len(run_ids) == 1:
            _print_summary(manifest, cost, metrics, manifest.config)
    if len(run_ids) > 1:
        comparison = analysis.compare(runs)
        folder = "reports/" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        store.put(f"{folder}/comparison.json", json.dumps(comparison, indent=1).encode())
        text = "# Comparison\n\n" + analysis.markdown(runs, comparison)
        for name, image in analysis.plots(runs, comparison).items():
            store.put(f"{folder}/{name}", image)
            text += f"\n![{name}]({name})\n"
        store.put(f"{folder}/report.md", text.encode())
        Console(soft_wrap=True).print(text)
        console.print(f"written to {store.uri}/{folder}/")


@app.command()
def exporter(port: Annotated[int, typer.Option(help="Port for /metrics.")] = 9808) -> None:
    """Serve the fleet's Prometheus metrics (jobs, LLM calls, tokens, USD, 429s, limiter waits,
    queue depth), read from Redis at each scrape."""
    from prometheus_client import REGISTRY, start_http_server

    settings = Settings()
    if not settings.shared_redis:
        raise typer.BadParameter(
            "the exporter reads the fleet's counters from Redis: set PRISM_BROKER_URL or PRISM_REDIS_URL"
        )
    REGISTRY.register(FleetCollector(redis.Redis.from_url(settings.shared_redis)))
    start_http_server(port)
    console.print(f"serving fleet metrics on :{port}/metrics")
    while True:
        time.sleep(3600)


@app.command(name="eval")
def evaluate(
    run_ids: Annotated[list[str], typer.Argument(help="One run, or several to compare.")], results: ResultsOpt = None
) -> None:
    """NDCG@5, MRR@5 and MAP@5 per task and over all queries (evidence precision/recall and
    answer EM/F1 where present); for several runs, statistics per configuration and Welch's
    t-test. The last line is JSON."""
    from producer import analysis

    runs = {}
    for run_id in run_ids:
        store, manifest = _open_run(run_id, results)
        summary = analysis.summarize(RunState(store, run_id).poll())
        if not summary["metrics"]:
            raise typer.BadParameter(f"run {run_id} has no qrels to evaluate against")
        store.put(RunLayout(run_id).file("metrics.json"), json.dumps(summary["metrics"], indent=1).encode())
        runs[run_id] = (manifest, summary)
        Console().print(_metrics_table({k: v for k, v in summary["metrics"].items() if "ndcg@5" in v}))
    if len(runs) == 1:
        typer.echo(json.dumps(next(iter(runs.values()))[1]["metrics"]))
        return
    comparison = analysis.compare(runs)
    Console(soft_wrap=True).print(analysis.markdown(runs, comparison))
    typer.echo(json.dumps(comparison))


prior_app = typer.Typer(help="The learned filing-type prior for document ranking.", no_args_is_help=True)
app.add_typer(prior_app, name="prior")


@prior_app.command("fit")
def prior_fit(
    input: Annotated[str, typer.Argument(help="Training rows (FinAgentBench document rows with qrels).")],
    out: Annotated[str, typer.Option("--out", help="Folder or s3:// prefix to write the model to.")],
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="Files whose rows must not be trained on (evaluation rows)."),
    ] = None,
    llm_share: Annotated[float, typer.Option(help="Share of queries the cascade sends to the LLM by default.")] = 0.25,
) -> None:
    """Fit the prior: features and ridge strength chosen by cross-validation on INPUT, less any
    row whose id or question is in an --exclude file; confidence calibrated out of fold."""
    from prism.prior import DocPrior

    settings = Settings()
    held_out = [q for path in exclude or [] for q in _read(path, settings)]
    ids, questions = {q.id for q in held_out}, {q.question for q in held_out}
    rows = [q for q in _read(input, settings) if q.id not in ids and q.question not in questions]
    console.print(f"fitting on {len(rows)} rows ({len(held_out)} held-out rows excluded)")
    model = DocPrior.fit(rows, llm_share=llm_share, log=console.print)
    store = open_store(out, settings)
    for name, data in model.to_files().items():
        store.put(name, data)
    meta = model.meta
    console.print(
        f"saved to {out}: {'+'.join(meta['features'])}, alpha {meta['alpha']}, cv ndcg@5 {meta['cv_ndcg5']}, cascade threshold {meta['cascade']['threshold']:.3f}"
    )


@prior_app.command("eval")
def prior_eval(
    input: Annotated[str, typer.Argument(help="Rows with qrels to score the prior on.")],
    model: Annotated[str | None, typer.Option("--model", help="The model; default: the one shipped.")] = None,
) -> None:
    """NDCG@5, MRR@5 and MAP@5 of the prior and of the constant type order on INPUT."""
    from prism.metrics import evaluate as score

    settings = Settings()
    prior = read_prior(model or settings.doc_prior or PACKAGED, settings)
    rows = [q for q in _read(input, settings) if q.task == "documents" and q.qrel]
    qrels = {q.id: q.qrel for q in rows}
    predicted = prior.predict([q.question for q in rows])
    confidence = prior.confidence(predicted)
    rankings = {q.id: prior.rank_predicted(p, q.candidates, 5).indices for q, p in zip(rows, predicted)}
    order = [int(i) for i in prior.meta.get("constant_order", [])] or None
    out = {"prior": score(rankings, qrels)}
    if order:
        out["constant"] = score({q.id: order for q in rows}, qrels)
    out["cascade_llm_share"] = {"queries": len(rows), "share": float((confidence < prior.threshold).mean())}
    Console().print(_metrics_table({k: v for k, v in out.items() if "ndcg@5" in v}))
    typer.echo(json.dumps(out))


def _read(uri: str, settings: Settings):
    from prism.datasets import Query, read_queries

    with open_input(uri, settings) as stream:
        return [q for q in read_queries(stream) if isinstance(q, Query)]


def _open_run(run_id: str, results: str | None):
    settings = Settings()
    store = open_store(results or settings.results, settings)
    try:
        return store, get_model(store, RunLayout(run_id).file("manifest.json"), RunManifest)
    except KeyError:
        raise typer.BadParameter(f"no run {run_id!r} in {store.uri}") from None


def _watch(
    state: RunState, plan: Plan, settings: Settings, celery_app, timeout: float | None, replan
) -> tuple[RunState, int]:
    """Wait until every enqueued job has an outcome. When nothing moves for ``stall_s``, no
    message is queued and no worker holds a task, the missing jobs were lost (a broker restart,
    a chord that cannot finish): enqueue them again, ``max_requeues`` times at most, then record
    them as failed. Results are write-once, so a job that was only slow is not stored twice."""
    deadline = time.monotonic() + timeout if timeout else None
    expected = plan.queries - plan.not_enqueued
    last_finished, last_change, requeues = -1, time.monotonic(), 0
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("ranking", total=expected)
        while True:
            try:
                state.poll()
            except Exception as err:  # noqa: BLE001 - the store may be down for a while: keep waiting
                progress.console.print(
                    f"[yellow]cannot read the results store ({type(err).__name__}); retrying[/yellow]"
                )
                time.sleep(2)
                continue
            finished = state.finished
            usd = cost_report(state)["total"]["usd"]
            progress.update(
                bar, completed=finished, description=f"ranking (failed {len(state.job_failures)}, ${float(usd):.4f})"
            )
            if finished >= expected or (deadline and time.monotonic() > deadline):
                return state, requeues
            if finished != last_finished:
                last_finished, last_change = finished, time.monotonic()
            elif (
                not settings.embedded and time.monotonic() - last_change > settings.stall_s and _fleet_idle(celery_app)
            ):
                if requeues >= settings.max_requeues:
                    _record_stalled(state, requeues)
                    continue
                requeues += 1
                progress.console.print(
                    f"[yellow]no progress for {settings.stall_s:.0f} s and the fleet is idle: enqueuing the {expected - finished} missing jobs again[/yellow]"
                )
                plan = replan()
                expected = plan.queries - plan.not_enqueued
                last_change = time.monotonic()
            time.sleep(0.5)


def _fleet_idle(celery_app) -> bool:
    """Nothing queued and no worker holding a task; unknown (broker down) counts as busy."""
    try:
        with celery_app.connection_for_read() as conn:
            try:
                queue = conn.default_channel.queue_declare(queue=celery_app.conf.task_default_queue, passive=True)
                if queue.message_count:
                    return False
            except ChannelError:  # no such queue: a restarted broker that lost it, so nothing waits
                pass
        inspect = celery_app.control.inspect(timeout=1.0)
        return not any(
            any(replies.values())
            for replies in (inspect.active() or {}, inspect.reserved() or {}, inspect.scheduled() or {})
        )
    except Exception:  # noqa: BLE001
        return False


def _record_stalled(state: RunState, requeues: int) -> None:
    """Give every job still without an outcome a failure that says why."""
    layout = state.layout
    done = {(r.task, r.query_id) for r in state.results.values()} | {
        (f.task, f.query_id) for f in state.failures.values()
    }
    for line in state.store.get(layout.file("plan.jsonl")).splitlines():
        p = json.loads(line)
        if p["state"] == "pending" or (p["task"], p["query_id"]) in done:
            continue
        failure = Failure(
            run_id=layout.run_id,
            kind="job",
            task=p["task"],
            query_id=p["query_id"],
            line=p["line"],
            error=f"no outcome after {requeues} requeue(s): the job was lost or its chord never completed",
        )
        put_model(state.store, layout.failure(f"{p['task']}-{p['query_id']}"), failure, if_absent=True)


def _print_settings(settings: Settings, config, input_name: str, results: str, run_id: str) -> None:
    mode = "embedded (in-process workers, no broker)" if settings.embedded else "fleet"
    console.print(f"[bold]prism run[/bold] {run_id}: {mode}; input {input_name}; results {results}")
    console.print(
        f"rankers: documents {config.doc_ranker} ({config.doc_prompt}), chunks {config.chunk_ranker} ({config.chunk_prompt}); models {config.models}"
    )
    logs.get().info("settings", settings=settings.masked(), config=config.model_dump(mode="json"))


def _metrics_table(metrics: dict) -> Table:
    table = Table(title="metrics (k = 5)")
    for column in ("task", "queries", "NDCG@5", "MRR@5", "MAP@5", "missing"):
        table.add_column(column, justify="right")
    for task, m in metrics.items():
        table.add_row(
            task, str(m["queries"]), f"{m['ndcg@5']:.4f}", f"{m['mrr@5']:.4f}", f"{m['map@5']:.4f}", str(m["missing"])
        )
    return table


def _print_summary(manifest: RunManifest, cost: dict, metrics: dict, config) -> None:
    out, c, total = Console(soft_wrap=True), manifest.counts, cost["total"]
    out.print(f"\n[bold]run {manifest.run_id}: {manifest.status}[/bold] in {manifest.timings.get('wall_s', 0):.1f} s")
    out.print(
        f"queries: {c.get('done', 0)} done ({c.get('reused', 0)} reused), {c.get('failed', 0)} failed, {c.get('pending', 0)} pending; {c.get('invalid_rows', 0)} invalid input rows"
    )
    unpriced = f" + {total['unpriced_calls']} unpriced call(s)" if total["unpriced_calls"] else ""
    out.print(
        f"LLM: {total['calls']} calls ({total['cached_calls']} from the cache), {total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens, USD {float(total['usd']):.4f}{unpriced}"
    )
    if savings := cost.get("savings"):
        usd = savings["usd_saved_estimate"]
        saved = "no LLM document call in this run to price it by" if usd is None else f"about ${float(usd):.4f}"
        out.print(
            f"documents: {savings['llm_calls_avoided']} answered by the prior, {savings['llm_calls_made']} by the LLM; saved against LLM-only: {saved}"
        )
    if ranked := {k: v for k, v in metrics.items() if "ndcg@5" in v}:
        out.print(_metrics_table(ranked))
    if evidence := metrics.get("evidence"):
        out.print(
            f"evidence ({evidence['queries']} queries): precision {evidence['precision']:.3f}, recall {evidence['recall']:.3f}, answer EM {evidence.get('exact_match', float('nan')):.3f}, token F1 {evidence.get('token_f1', float('nan')):.3f}"
        )
    out.print(f"results, manifest, cost.json and report.md: {manifest.results.rstrip('/')}/runs/{manifest.run_id}/")
    if not (config.uses_llm("documents") or config.uses_llm("chunks")):
        by = {"prior": "the learned filing-type prior", "lexical": "BM25"}
        out.print(
            f"[yellow]No LLM was used:[/yellow] documents were ranked by {by.get(config.doc_ranker, config.doc_ranker)} and "
            f"chunks by {by.get(config.chunk_ranker, config.chunk_ranker)}, at $0. To rank with an LLM set "
            "OPENAI_API_KEY (or PRISM_LLM_BASE_URL for any OpenAI-compatible server); to run on a fleet set "
            "PRISM_BROKER_URL and PRISM_RESULTS=s3://bucket/prefix and start workers with `celery -A workers.app worker`."
        )


def _code_version() -> str:
    text = version("prism-fleet")
    try:
        here = Path(__file__).resolve().parent
        sha = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if sha.returncode == 0 and sha.stdout.strip():
            text += f"+{sha.stdout.strip()}"
    except OSError:
        pass
    return text


def main() -> None:
    app()
