"""``prism``: plan and enqueue ranking runs, watch them, report on them. A thin layer: the run
lifecycle is producer/runs.py, the read model producer/state.py, names prism/registry.py."""

from __future__ import annotations

import gc
import json
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from prism import registry
from producer.spec import RunError, RunSpec
from workers import logs
from workers.settings import Settings, SettingsProblem, load_settings
from workers.store import Store, open_input, open_store

if TYPE_CHECKING:  # each command imports the run machinery it uses: `--help` and `ingest` start sooner
    from prism.models import RunManifest
    from producer.runs import RunEnd, Runs

app = typer.Typer(
    help="Rank financial filings for questions with an LLM fleet (the PRISM method).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True, soft_wrap=True)
SAMPLE = "bundled sample"


def _choices(names) -> str:
    return ", ".join(names)


InputArg = Annotated[
    str | None,
    typer.Argument(
        help="JSONL input (plain or .gz): a path, a folder, or s3://bucket/key (a prefix ending in '/'). "
        "Default: the bundled sample."
    ),
]
RunIdOpt = Annotated[str | None, typer.Option("--run-id", help="Reuse a run id; default: a new one.")]
ResultsOpt = Annotated[
    str | None, typer.Option("--results", help="Results folder or s3://bucket/prefix (PRISM_RESULTS).")
]
DocRankerOpt = Annotated[
    str | None,
    typer.Option("--doc-ranker", help=f"{_choices(registry.names('documents'))} (PRISM_DOC_RANKER)."),
]
ChunkRankerOpt = Annotated[
    str | None,
    typer.Option("--chunk-ranker", help=f"{_choices(registry.names('chunks'))} (PRISM_CHUNK_RANKER)."),
]
DocPromptOpt = Annotated[
    str | None, typer.Option("--doc-prompt", help=f"{_choices(registry.PROMPTS)} (PRISM_DOC_PROMPT).")
]
ChunkPromptOpt = Annotated[
    str | None, typer.Option("--chunk-prompt", help=f"{_choices(registry.PROMPTS)} (PRISM_CHUNK_PROMPT).")
]
TopNOpt = Annotated[int | None, typer.Option("--top-n", help="Chunks in the final ranking (PRISM_TOP_N).")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Plan at most this many queries.")]
BudgetOpt = Annotated[
    Decimal | None, typer.Option("--budget-usd", help="Stop the run at this spend (PRISM_BUDGET_USD).")
]
WaitOpt = Annotated[bool, typer.Option(help="Wait for the run to finish and report.")]
TimeoutOpt = Annotated[float | None, typer.Option(min=1, help="Stop waiting after this many seconds.")]
IclDocsOpt = Annotated[int | None, typer.Option(help="In-context examples per document prompt (PRISM_ICL_DOCUMENTS).")]
IclChunksOpt = Annotated[int | None, typer.Option(help="In-context examples per chunk prompt (PRISM_ICL_CHUNKS).")]
PrefilterOpt = Annotated[
    int | None, typer.Option(help="Keep this many chunks per filing by the pre-filter scorer (PRISM_PREFILTER_KEEP).")
]
PrefilterShareOpt = Annotated[
    float | None,
    typer.Option(
        "--prefilter-share",
        help="Or keep the best chunks that fit in this share of the filing's tokens (PRISM_PREFILTER_SHARE).",
    ),
]
QuestionsOpt = Annotated[
    str | None, typer.Option("--questions", help="A question set (JSONL) over --corpus, instead of INPUT.")
]
CorpusOpt = Annotated[str | None, typer.Option("--corpus", help="The corpus (prism ingest) the question set is over.")]
FilingsOpt = Annotated[
    str | None,
    typer.Option(
        "--filings",
        help="Filings ranked per question: a number, or auto (the best and those scored close to it; "
        "PRISM_FILINGS_PER_QUESTION).",
    ),
]
FreshOpt = Annotated[
    bool, typer.Option("--fresh", help="Rank every query, even those an earlier run ranked with the same job id.")
]


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
    icl_documents: IclDocsOpt = None,
    icl_chunks: IclChunksOpt = None,
    prefilter: PrefilterOpt = None,
    prefilter_share: PrefilterShareOpt = None,
    fresh: FreshOpt = False,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = None,
    questions: QuestionsOpt = None,
    corpus: CorpusOpt = None,
    filings: FilingsOpt = None,
    new: Annotated[
        bool,
        typer.Option(
            "--new",
            help="Nightly: start from the last run over --corpus; questions with nothing new in scope are reused at $0.",
        ),
    ] = False,
    via: Annotated[
        str | None,
        typer.Option(
            "--via",
            help="online, or batch: the LLM requests go in Batch API files at half price, answers within 24 h (PRISM_VIA).",
        ),
    ] = None,
) -> None:
    """Plan, enqueue, wait with a progress bar, write the report and print a summary.

    INPUT is a JSONL file, or a folder or s3:// prefix (ending in '/') of them. Or a question set
    over a corpus: --questions Q --corpus URI. A run id that already has results ranks only what
    it is missing. Exits 0 complete, 3 complete with failures, 1 failed, 4 budget spent, 5
    incomplete, 6 interrupted.
    """
    if (questions is None) != (corpus is None):
        raise RunError("--questions and --corpus go together: a question set runs over a corpus")
    if questions is not None and input is not None:
        raise RunError(f"{input}: give INPUT or --questions, not both")
    if new and corpus is None:
        raise RunError("--new goes with --questions and --corpus: it starts from the last run over a corpus")
    flags = {
        "doc_ranker": doc_ranker,
        "chunk_ranker": chunk_ranker,
        "doc_prompt": doc_prompt,
        "chunk_prompt": chunk_prompt,
        "top_n": top_n,
        "icl_documents": icl_documents,
        "icl_chunks": icl_chunks,
        "prefilter_keep": prefilter,
        "prefilter_share": prefilter_share,
        "budget_usd": budget_usd,
        "results": results,
        "filings_per_question": filings,
        "via": via,
    }
    from producer.runs import check_run_id, new_run_id
    from workers.ledger import last_over
    from workers.priors import with_examples, with_prior

    settings = _settings(flags)
    config = with_examples(with_prior(settings.run_config(), settings), settings)
    spec = RunSpec(
        run_id=check_run_id(run_id) if run_id else new_run_id(),
        input=questions or input or str(files("prism").joinpath("data", "sample.jsonl.gz")),
        results=settings.results,
        config=config,
        budget_usd=settings.budget_usd,
        reuse=not fresh,
        limit=limit,
        corpus=corpus,
        via=settings.via,
    )
    if new:
        assert corpus is not None
        since = last_over(open_store(settings.results, settings), corpus)
        if since is None:
            console.print(
                f"--new: no complete earlier run over {corpus} in {settings.results}; every question is planned"
            )
        else:
            console.print(f"--new: starting from run {since}, the last complete run over {corpus}")
        spec = replace(spec, since=since)
    runs = _runs(settings)
    _print_settings(settings, spec, questions or input or SAMPLE)
    _end(runs.start(spec, wait, timeout), wait)


@app.command()
def estimate(
    input: Annotated[
        str | None, typer.Argument(help="A local JSONL rows file (plain or gzipped); or --questions Q --corpus C.")
    ] = None,
    doc_ranker: DocRankerOpt = None,
    chunk_ranker: ChunkRankerOpt = None,
    limit: LimitOpt = None,
    output_tokens: Annotated[
        int | None,
        typer.Option(
            min=0, help="Expected output tokens per request, reasoning included (PRISM_LLM_EXPECTED_OUTPUT_TOKENS)."
        ),
    ] = None,
    reasoning_share: Annotated[
        float,
        typer.Option(
            min=0, help="Reasoning tokens expected per prompt token on top of that (PRISM's runs: about 0.18)."
        ),
    ] = 0.0,
    questions: QuestionsOpt = None,
    corpus: CorpusOpt = None,
    filings: FilingsOpt = None,
) -> None:
    """USD of a run over INPUT, or of a question set over a corpus, before any call: per tier,
    with and without the provider's cache. Nothing is written and no LLM is called."""
    from producer.estimate import estimate_questions, read_rows

    if (questions is None) != (corpus is None):
        raise RunError("--questions and --corpus go together: a question set is priced over a corpus")
    if questions is not None and input is not None:
        raise RunError(f"{input}: give INPUT or --questions, not both")
    if questions is None and input is None:
        raise RunError("give a rows file (INPUT), or a question set over a corpus (--questions Q --corpus C)")
    settings = _settings({"doc_ranker": doc_ranker, "chunk_ranker": chunk_ranker, "filings_per_question": filings})
    config = settings.run_config()
    expected = output_tokens if output_tokens is not None else settings.llm_expected_output_tokens
    outputs = config.expected_outputs(expected)
    out = Console(soft_wrap=True)
    if questions is not None:
        assert corpus is not None
        found = estimate_questions(questions, corpus, settings, config, outputs, reasoning_share, limit)
        result = found.estimate
        bad = f" ({_count(len(found.bad_lines), 'bad line')}, not priced)" if found.bad_lines else ""
        out.print(
            f"{_count(found.questions, 'question')} read from {questions}{bad}, {len(found.no_filing)} with no filing "
            f"in scope; {_count(found.pairs, 'filing')} chosen (pairs, --filings {settings.filings_per_question}), "
            f"{_count(result.segments, 'segment')}; {_count(found.document_calls, 'document ranking call')} "
            f"({config.doc_ranker})",
            highlight=False,
        )
        for line in found.bad_lines[:SAID_LINES] + found.no_filing[:SAID_LINES]:
            out.print(f"  {line}", highlight=False)
        if max(len(found.bad_lines), len(found.no_filing)) > SAID_LINES:
            out.print(f"  (the first {SAID_LINES} of each)", highlight=False)
        if config.doc_ranker != "prior":
            out.print(
                f"filings chosen by the document prior's form scores: where the period does not settle the "
                f"choice, the {config.doc_ranker} ranking of the run may choose others",
                highlight=False,
            )
        out.print(f"layout {result.layout}, {expected} output tokens expected per request")
    else:
        assert input is not None
        if not Path(input).is_file():
            raise RunError(f"{input}: no such local file")
        from prism.estimate import estimate as run_estimate
        from prism.pricing import PriceTable

        queries, bad_rows = read_rows(input, limit)
        result = run_estimate(
            queries,
            config,
            PriceTable.load(settings.prices_file),
            outputs,
            settings.prompt_cache_key,
            reasoning_share=reasoning_share,
        )
        out.print(f"{result.queries} queries, layout {result.layout}, {expected} output tokens expected per request")
        if bad_rows:
            out.print(
                f"[yellow]{len(bad_rows)} bad lines, not priced; the first: {bad_rows[0]}[/yellow]", highlight=False
            )
    for stage, s in result.stages.items():
        out.print(
            f"{stage}: {s.calls} calls, {s.prompt_tokens} prompt tokens ({s.cached_tokens} cacheable), {s.completion_tokens} output"
        )
    u = result.usd
    out.print(
        f"USD standard {float(u['standard']):.4f} (with the provider cache {float(u['standard_cached']):.4f}); "
        f"flex {float(u['flex']):.4f} (with the cache {float(u['flex_cached']):.4f}); "
        f"batch {float(u['batch']):.4f} (with the cache {float(u['batch_cached']):.4f})"
    )
    if result.unpriced_models:
        out.print(f"[yellow]no price for {', '.join(result.unpriced_models)}: left out of the USD figures[/yellow]")


SAID_LINES = 5  # bad lines and questions with no filing an estimate names; the rest are counted


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


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


@app.command()
def ingest(
    source: Annotated[str, typer.Argument(help="A filing, a folder of them, or an s3:// prefix ending in '/'.")],
    corpus: Annotated[str, typer.Option("--corpus", help="The corpus: a folder or s3://bucket/prefix.")],
    meta: Annotated[
        str | None, typer.Option("--meta", help="A metadata JSONL (company, form type, period) for files without one.")
    ] = None,
    chunk_tokens: Annotated[
        int, typer.Option("--chunk-tokens", min=16, help="Chunk size of HTML and text filings, in tokens.")
    ] = 512,
) -> None:
    """Ingest filings (PDF, HTML, text, or benchmark rows) into a corpus, once per version: an
    unchanged filing is a no-op, a changed one a new version; a file whose size, time and
    metadata are as last ingested is not read again. One fleet task per file (in this process
    when no broker is configured). A filing that cannot be read is a stored failure; the
    rest go on. Exits 1 when no filing could be ingested."""
    from pathlib import Path, PurePosixPath

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from prism.ingest.models import Chunking
    from producer.ingest import ingest as ingest_files

    settings = _settings()
    if not source.startswith("s3://") and not Path(source).exists():
        raise RunError(f"{source}: no such file or folder")
    if meta is not None and not Path(meta).is_file():
        raise RunError(f"--meta {meta}: no such file")
    if not corpus.startswith("s3://") and Path(corpus).is_file():
        raise RunError(f"--corpus {corpus}: is a file; give a folder or an s3:// URI")
    columns = (TextColumn("ingesting files"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("ingest", total=None)
        summary = ingest_files(
            source,
            corpus,
            settings,
            Chunking(chunk_tokens=chunk_tokens),
            meta,
            on_progress=lambda done, total: bar.update(task, completed=done, total=total),
            on_note=lambda text: bar.console.print(f"[yellow]{text}[/yellow]"),
        )
    console.print(
        f"{summary.sources} sources: {summary.ingested} filings ingested, {summary.new_versions} new versions, "
        f"{summary.unchanged} unchanged ({summary.skipped} files not read again), {summary.failed} failed; {summary.pages} pages ({summary.empty_pages} "
        f"empty), {summary.chunks} chunks, {summary.tokens} tokens in {summary.seconds:.1f} s: {corpus}"
    )
    for failure in summary.failures[:10]:
        console.print(f"[yellow]not ingested:[/yellow] {failure}", highlight=False)
    if len(summary.failures) > 10:
        console.print(f"and {len(summary.failures) - 10} more: the corpus manifest lists every failure")
    for fid, fields in list(summary.guessed.items())[:10]:
        console.print(
            f"[yellow]identity guessed:[/yellow] {fid}: {fields} (a metadata file overrides)", highlight=False
        )
    if len(summary.guessed) > 10:
        console.print(f"and {len(summary.guessed) - 10} more filings with guessed fields (their meta.guessed)")
    if summary.unsupported:
        n, shown = len(summary.unsupported), ", ".join(PurePosixPath(u).name for u in summary.unsupported[:5])
        more = f" and {n - 5} more" if n > 5 else ""
        console.print(
            f"{n} file{'s' if n > 1 else ''} not ingested (not .pdf/.htm/.html/.txt/.jsonl): {shown}{more}",
            highlight=False,
        )
    if not summary.sources:
        raise RunError(f"{source}: no filings (.pdf, .htm, .html, .txt, .jsonl, .jsonl.gz) found")
    if summary.failed and not (summary.ingested or summary.unchanged or summary.new_versions):
        raise typer.Exit(1)


@app.command()
def resume(
    run_id: str,
    results: ResultsOpt = None,
    budget_usd: BudgetOpt = None,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = None,
    failed: Annotated[
        bool,
        typer.Option("--failed", help="Also run the run's failed jobs again; their new outcomes replace the failures."),
    ] = False,
) -> None:
    """Enqueue what a run is missing (lost jobs, or those its budget stopped; with --failed, its
    failed ones too) and wait for it. The input and the config are the run's own; --budget-usd
    raises its cap. Exits as `prism run` does."""
    settings = _settings({"budget_usd": budget_usd})
    _end(_runs(settings).resume(run_id, results, budget_usd, wait, timeout, failed), wait)


@app.command()
def status(run_id: str, results: ResultsOpt = None) -> None:
    """Done, failed and pending jobs, tokens, USD and the time left."""
    from producer.state import RunState, cost_report, usd_text
    from workers.batches import batch_summary
    from workers.circuit import outage_text

    runs = _runs(_settings())
    store, manifest = runs.refresh(run_id, results)
    state = RunState(store, run_id).poll()
    planned = runs.expected(store, manifest)
    cost = cost_report(state)["total"]
    elapsed = (datetime.now(UTC) - manifest.created_at).total_seconds()
    running = manifest.status in ("planning", "running")
    pending = max(0, planned - state.finished)
    eta = pending * elapsed / state.finished if state.finished and pending else 0.0
    title = f"run {run_id} ({manifest.status}{f': {manifest.error}' if manifest.error else ''})"
    table = Table(title=title)
    for column in ("done", "failed", "skipped (budget)", "pending", "invalid rows", "tokens", "USD", "ETA"):
        table.add_column(column, justify="right")
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    eta_text = "-" if not (pending and running) else (f"{eta:.0f} s" if state.finished else "unknown")
    table.add_row(
        str(len(state.results)),
        str(len(state.job_failures)),
        str(len(state.skipped)),
        str(pending),
        str(len(state.input_failures)),
        str(tokens),
        usd_text(cost),
        eta_text,
    )
    Console().print(table)
    if running and (outages := runs.runtime.outages()):
        Console().print(f"{outage_text(outages)}, {pending} jobs waiting", highlight=False)
    if manifest.via == "batch":
        Console().print(batch_summary(store, run_id), highlight=False)


@app.command()
def report(
    run_ids: Annotated[list[str], typer.Argument(help="One run, or several to compare.")], results: ResultsOpt = None
) -> None:
    """Rewrite each run's report (markdown and PNG plots, in the run's folder) from what is
    stored now; for several runs, also a comparison in reports/<time>/ (mean, SD, CV, 95% CI,
    Welch's t-test per configuration)."""
    from producer import analysis
    from producer.state import RunState

    runs = _runs(_settings())
    compared, store = {}, None
    for run_id in run_ids:
        store, manifest = runs.refresh(run_id, results)
        state = RunState(store, run_id)
        end = runs.finalize(state, manifest, manifest.status == "budget_exhausted")
        compared[run_id] = (end.manifest, analysis.summarize(state))
        if len(run_ids) == 1:
            _print_summary(end)
    if len(run_ids) > 1 and store is not None:
        comparison = analysis.compare(compared)
        folder = "reports/" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        store.put(f"{folder}/comparison.json", json.dumps(comparison, indent=1).encode())
        text = "# Comparison\n\n" + analysis.markdown(compared, comparison)
        images, left_out = analysis.plots(compared, comparison)
        for name, image in images.items():
            store.put(f"{folder}/{name}", image)
            text += f"\n![{name}]({name})\n"
        text += "".join(f"\n_{name} is left out: {why}._\n" for name, why in left_out.items())
        store.put(f"{folder}/report.md", text.encode())
        Console(soft_wrap=True).print(text)
        console.print(f"written to {store.uri}/{folder}/")


@app.command()
def exporter(port: Annotated[int, typer.Option(help="Port for /metrics.")] = 9808) -> None:
    """Serve the fleet's Prometheus metrics (jobs, LLM calls, tokens, USD, 429s, limiter waits,
    queue depth), read from Redis at each scrape."""
    import redis
    from prometheus_client import REGISTRY, start_http_server

    from workers.metrics import FleetCollector

    settings = _settings()
    if not settings.shared_redis:
        raise RunError("the exporter reads the fleet's counters from Redis: set PRISM_BROKER_URL or PRISM_REDIS_URL")
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
    from producer.state import RunState
    from workers.ledger import RunLayout

    runs, compared = _runs(_settings()), {}
    for run_id in run_ids:
        store, manifest = runs.open_run(run_id, results)
        if manifest.corpus:  # a question set: its evidence against the qrels over (filing, page)
            typer.echo(json.dumps(_evidence_metrics(runs, store, manifest)))
            continue
        summary = analysis.summarize(RunState(store, run_id).poll())
        if not summary["metrics"]:
            raise RunError(f"run {run_id} has no qrels to evaluate against")
        store.put(RunLayout(run_id).file("metrics.json"), json.dumps(summary["metrics"], indent=1).encode())
        compared[run_id] = (manifest, summary)
        Console().print(_metrics_table({k: v for k, v in summary["metrics"].items() if "ndcg@5" in v}))
    if len(compared) <= 1:
        if compared:
            typer.echo(json.dumps(next(iter(compared.values()))[1]["metrics"]))
        return
    comparison = analysis.compare(compared)
    Console(soft_wrap=True).print(analysis.markdown(compared, comparison))
    typer.echo(json.dumps(comparison))


def _evidence_metrics(runs: Runs, store: Store, manifest: RunManifest) -> dict:
    """A question-set run's evidence metrics (filing_top1, evidence recall@5 and NDCG@5), kept
    in its evidence_metrics.json."""
    from producer import evidence
    from producer.state import RunState
    from workers.corpus import Corpus
    from workers.ledger import RunLayout

    assert manifest.corpus is not None
    _, metrics = evidence.evidence_rows(
        RunState(store, manifest.run_id).poll(), Corpus(runs.runtime.store(manifest.corpus))
    )
    if not metrics["judged"]:
        raise RunError(
            f"run {manifest.run_id}: none of its {metrics['questions']} questions has qrels over a filing of its corpus"
        )
    store.put(RunLayout(manifest.run_id).file("evidence_metrics.json"), json.dumps(metrics, indent=1).encode())
    table = Table(title=f"run {manifest.run_id}: evidence (k = 5)")
    for column in ("questions", "judged", "filing top-1", "evidence recall@5", "evidence NDCG@5"):
        table.add_column(column, justify="right")
    table.add_row(
        *(str(metrics[k]) for k in ("questions", "judged")),
        *(f"{metrics[k]:.4f}" for k in ("filing_top1", "evidence_recall@5", "evidence_ndcg@5")),
    )
    Console().print(table)
    return metrics


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
    from workers.runtime import Runtime

    settings = _settings()
    rows, held_out = _training_rows(input, exclude or [], settings)
    name = embedder_name or settings.embedder
    with recording() as calls:
        store = ExampleStore.build(rows, make_embedder(name, Runtime(settings).gateway))
    target = open_store(out, settings)
    for file, data in store.to_files().items():
        target.put(file, data)
    usd = sum(c.usd or 0 for c in calls)
    console.print(
        f"{store.meta['count']} examples ({len(held_out)} held-out rows excluded), {name} embeddings of {store.meta['dim']} dimensions, {len(calls)} API calls, USD {float(usd):.4f}: {out}"
    )


corpus_app = typer.Typer(help="What a corpus holds.", no_args_is_help=True)
app.add_typer(corpus_app, name="corpus")


@corpus_app.command("ls")
def corpus_ls(
    corpus: Annotated[str, typer.Option("--corpus", help="The corpus: a folder or s3://bucket/prefix.")],
) -> None:
    """Every filing of a corpus: the id a question's qrels name, with its company, CIK, form,
    period, pages and documents, and the identity fields that were guessed."""
    from workers.corpus import Corpus
    from workers.store import open_store

    settings = _settings()
    manifest = Corpus(open_store(corpus, settings)).manifest()
    if not manifest.filings:
        raise RunError(f"--corpus {corpus}: no filings there")
    # one tab-separated line a filing, whole ids: for reading and for scripts alike
    typer.echo("\t".join(("filing", "company", "cik", "form", "period", "pages", "guessed")))
    for fid, entry in manifest.filings.items():
        meta = entry.meta
        latest = next(v for v in entry.versions if v.version == entry.latest)
        period = str(meta.period_end) if meta.period_end else (f"FY{meta.fiscal_year}" if meta.fiscal_year else "")
        row = (fid, meta.company or "", meta.cik or "", meta.form_type or "", period, str(latest.pages))
        typer.echo("\t".join((*row, ",".join(meta.guessed))))
    console.print(f"{len(manifest.filings)} filings in {corpus}")
    if manifest.failures:
        console.print(f"{len(manifest.failures)} sources gave no filing (the manifest's failures say why)")


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

    settings = _settings()
    rows, held_out = _training_rows(input, exclude or [], settings)
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
    from workers.priors import PACKAGED, read_prior

    settings = _settings()
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


def _training_rows(input: str, exclude: list[str], settings: Settings) -> tuple[list, list]:
    """The rows of INPUT less any whose id or question is in an --exclude file, and those held out."""
    held_out = [q for path in exclude for q in _read(path, settings)]
    ids, questions = {q.id for q in held_out}, {q.question for q in held_out}
    return [q for q in _read(input, settings) if q.id not in ids and q.question not in questions], held_out


def _read(uri: str, settings: Settings):
    """The valid queries of a file (training rows for the prior or the examples)."""
    from functools import partial

    from prism.datasets import Query, read_input

    return [q for q in read_input(uri, partial(open_input, uri, settings)) if isinstance(q, Query)]


def _settings(flags: dict | None = None) -> Settings:
    """The settings, with the command's flags on top (checked the same way, named as flags)."""
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    try:
        return load_settings(**given)
    except SettingsProblem as err:
        for field in given:  # a bad flag is named as the flag, not as the variable it overrides
            err = SettingsProblem(str(err).replace(f"PRISM_{field.upper()}", f"--{_FLAGS.get(field, field)}"))
        raise err from None


_FLAGS = {k: k.replace("_", "-") for k in ("doc_ranker", "chunk_ranker", "doc_prompt", "chunk_prompt", "top_n")}
_FLAGS |= {
    "prefilter_keep": "prefilter",
    "prefilter_share": "prefilter-share",
    "icl_documents": "icl-documents",
    "icl_chunks": "icl-chunks",
}
_FLAGS |= {"budget_usd": "budget-usd", "results": "results", "filings_per_question": "filings", "via": "via"}


def _runs(settings: Settings) -> Runs:
    from producer.runs import Runs

    logs.configure(settings.log_level if not settings.embedded else "WARNING")
    return Runs(settings, console)


def _end(end: RunEnd, wait: bool) -> None:
    from producer.runs import EXIT_CODES

    if not wait:
        typer.echo(end.manifest.run_id)
        return
    _print_summary(end)
    for error in end.input_errors[:5]:
        console.print(f"[yellow]invalid input:[/yellow] {error}", highlight=False)
    if len(end.input_errors) > 5:
        console.print(f"... and {len(end.input_errors) - 5} more in failures.jsonl")
    if code := EXIT_CODES.get(end.manifest.status, 0):
        raise typer.Exit(code)


def _print_settings(settings: Settings, spec: RunSpec, input_name: str) -> None:
    config = spec.config
    mode = "embedded (in-process workers, no broker)" if settings.embedded else "fleet"
    console.print(f"[bold]prism run[/bold] {spec.run_id}: {mode}; input {input_name}; results {spec.results}")
    console.print(
        f"rankers: documents {config.doc_ranker} ({config.doc_prompt}), chunks {config.chunk_ranker} "
        f"({config.chunk_prompt}); models {config.models}"
    )
    # The whole of it is in the run's manifest.json (secrets masked); the terminal gets the lines above.
    logs.get().debug("settings", settings=settings.masked(), config=config.model_dump(mode="json"))


def _metrics_table(metrics: dict) -> Table:
    table = Table(title="metrics (k = 5)")
    for column in ("task", "queries", "NDCG@5", "MRR@5", "MAP@5", "missing"):
        table.add_column(column, justify="right")
    for task, m in metrics.items():
        table.add_row(
            task, str(m["queries"]), f"{m['ndcg@5']:.4f}", f"{m['mrr@5']:.4f}", f"{m['map@5']:.4f}", str(m["missing"])
        )
    return table


def _print_summary(end: RunEnd) -> None:
    from producer.state import usd_text

    manifest, cost, metrics, config = end.manifest, end.cost, end.metrics, end.manifest.config
    out, c, total = Console(soft_wrap=True), manifest.counts, cost["total"]
    why = f" ({manifest.error})" if manifest.error else ""
    paused = manifest.timings.get("provider_unavailable_s")
    waited = f" ({paused:.0f} s of it with the LLM provider unavailable)" if paused else ""
    out.print(
        f"\n[bold]run {manifest.run_id}: {manifest.status}[/bold]{why} in {manifest.timings.get('wall_s', 0):.1f} s{waited}"
    )
    out.print(
        f"queries: {c.get('done', 0)} done ({c.get('reused', 0)} reused), {c.get('failed', 0)} failed, {c.get('pending', 0)} pending; {c.get('invalid_rows', 0)} invalid input rows"
    )
    out.print(
        f"LLM: {total['calls']} calls ({total['cached_calls']} from the cache), {total['prompt_tokens']} prompt ({total.get('cached_tokens', 0)} cached at the provider) + {total['completion_tokens']} completion tokens, USD {usd_text(total)}"
    )
    for check in manifest.prompt_checks:
        if check.dropped is not False:
            out.print(f"[bold red]warning:[/bold red] {check.text()}", highlight=False)
    if savings := cost.get("savings"):
        usd = savings["usd_saved_estimate"]
        saved = "no LLM document call in this run to price it by" if usd is None else f"about ${float(usd):.4f}"
        out.print(
            f"documents: {savings['llm_calls_avoided']} answered by the prior, {savings['llm_calls_made']} by the LLM; saved against LLM-only: {saved}"
        )
    if ranked := {k: v for k, v in metrics.items() if "ndcg@5" in v}:
        out.print(_metrics_table(ranked))
    if asked := metrics.get("questions"):
        shown = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in asked.items() if not isinstance(v, dict)
        )
        out.print(f"questions: {shown}; evidence table: evidence.csv, evidence.parquet")
    if evidence := metrics.get("evidence"):
        out.print(
            f"evidence ({evidence['queries']} queries): precision {evidence['precision']:.3f}, recall {evidence['recall']:.3f}, answer EM {evidence.get('exact_match', float('nan')):.3f}, token F1 {evidence.get('token_f1', float('nan')):.3f}"
        )
    out.print(f"results, manifest, cost.json and report.md: {manifest.results.rstrip('/')}/runs/{manifest.run_id}/")
    if not (config.uses_llm("documents") or config.uses_llm("chunks")):
        by = {"prior": "the learned filing-type prior", "lexical": "BM25", "financial": "the financial retriever"}
        out.print(
            f"[yellow]No LLM was used:[/yellow] documents were ranked by {by.get(config.doc_ranker, config.doc_ranker)} and "
            f"chunks by {by.get(config.chunk_ranker, config.chunk_ranker)}, at $0. To rank with an LLM set "
            "OPENAI_API_KEY (or PRISM_LLM_BASE_URL for any OpenAI-compatible server); to run on a fleet set "
            "PRISM_BROKER_URL and PRISM_RESULTS=s3://bucket/prefix and start workers with `celery -A workers.app worker`."
        )


def main() -> None:
    """Every error a user can cause ends in one line and exit status 2 (1 for a failed run);
    anything else in one line too, with the traceback only at PRISM_LOG_LEVEL=DEBUG."""
    try:
        _main()
    finally:
        # The process is ending: CPython's teardown would walk every object it holds for cycles,
        # several times over (~0.2 s of each command); their memory goes back with the process.
        gc.freeze()


def _main() -> None:
    try:
        code = app(standalone_mode=False)  # returns the exit status of typer.Exit and --help
    except _user_errors() as err:
        _fail(str(err), 2)
    except _raised_by("botocore.exceptions", "NoCredentialsError"):
        _fail("no AWS credentials for the S3 store: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)", 2)
    except _raised_by("botocore.exceptions", "ClientError", "BotoCoreError") as err:
        _fail(f"the S3 store refused: {err} (PRISM_RESULTS, PRISM_S3_ENDPOINT_URL)", 2)
    except _raised_by("redis", "RedisError") as err:
        _fail(f"Redis is not reachable: {err} (PRISM_BROKER_URL, PRISM_REDIS_URL)", 2)
    except typer.Abort:
        _fail("aborted", 130)
    except typer.TyperException as err:  # a bad flag or argument: typer's own message
        show = getattr(err, "show", None)
        if callable(show):
            show()
            raise SystemExit(getattr(err, "exit_code", 2)) from None
        _fail(str(err), 2)
    except KeyboardInterrupt:
        _fail("interrupted; `prism resume RUN_ID` goes on where the run stopped", 130)
    except Exception as err:  # noqa: BLE001 - no traceback reaches a user unless asked for
        if _debug():
            raise
        _fail(f"{type(err).__name__}: {err} (set PRISM_LOG_LEVEL=DEBUG for the traceback)", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _user_errors() -> tuple[type[Exception], ...]:
    """The errors a user's input or settings cause; imported only once something is raised, since
    two live beside heavy modules (the example index, the prior) that most commands never load."""
    from prism.datasets import InputFileError, RowError
    from prism.icl import ExampleStoreError
    from prism.prior import PriorModelError

    return (SettingsProblem, RunError, ExampleStoreError, PriorModelError, RowError, InputFileError)


def _raised_by(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """Those error classes of ``module`` where it was loaded: a command that never loaded it (a
    local run has no S3 client; an embedded one no Redis) cannot have raised them."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, name) for name in names) if loaded else ()


def _debug() -> bool:
    import os

    return os.environ.get("PRISM_LOG_LEVEL", "").upper() == "DEBUG"


def _fail(message: str, status: int) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    sys.exit(status)
