"""`prism prior`, `prism icl` and `prism exporter`: the document prior, the in-context examples
and the fleet's metrics."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from producer.commands.common import console
from producer.flags import settings_with
from producer.spec import RunError
from producer.summary import metrics_table
from workers.settings import Settings, named
from workers.store import open_input, open_store

if TYPE_CHECKING:
    from prism.models import Query

prior_app = typer.Typer(help="The learned filing-type prior for document ranking.", no_args_is_help=True)
icl_app = typer.Typer(
    help="In-context examples: the FAISS store of training questions and their rankings.", no_args_is_help=True
)
OutOpt = Annotated[str, typer.Option("--out", help="Folder or s3:// prefix to write to.")]
ExcludeOpt = Annotated[
    list[str] | None, typer.Option("--exclude", help="Files whose rows must not be trained on (evaluation rows).")
]


@prior_app.command("fit")
def prior_fit(
    input: Annotated[str, typer.Argument(help="Training rows (FinAgentBench document rows with qrels).")],
    out: OutOpt,
    exclude: ExcludeOpt = None,
    llm_share: Annotated[float, typer.Option(help="Share of queries the cascade sends to the LLM by default.")] = 0.25,
) -> None:
    """Fit the prior: features and ridge strength chosen by cross-validation on INPUT, less any
    row whose id or question is in an --exclude file; confidence calibrated out of fold."""
    from prism.ranking.prior import DocPrior

    settings = settings_with({})
    rows, held_out = _training_rows(input, exclude or [], settings)
    console.print(f"fitting on {len(rows)} rows ({len(held_out)} held-out rows excluded)")
    model = DocPrior.fit(rows, llm_share=llm_share, log=console.print)
    store = open_store(out, settings)
    for name, data in model.to_files().items():
        store.put(name, data)
    meta = model.meta
    console.print(
        f"saved to {out}: {'+'.join(meta['features'])}, alpha {meta['alpha']}, cv ndcg@5 {meta['cv_ndcg5']}, "
        f"cascade threshold {meta['cascade']['threshold']:.3f}"
    )


@prior_app.command("eval")
def prior_eval(
    input: Annotated[str, typer.Argument(help="Rows with qrels to score the prior on.")],
    model: Annotated[str | None, typer.Option("--model", help="The model; default: the one shipped.")] = None,
) -> None:
    """NDCG@5, MRR@5 and MAP@5 of the prior and of the constant type order on INPUT."""
    from prism.ranking.metrics import evaluate as score
    from workers.priors import PACKAGED, read_prior

    settings = settings_with({})
    prior = read_prior(model or settings.doc_prior or PACKAGED, settings)
    rows = [q for q in _read(input, settings) if q.task == "documents" and q.qrel]
    qrels = {q.id: q.qrel for q in rows if q.qrel}
    predicted = prior.predict([q.question for q in rows])
    confidence = prior.confidence(predicted)
    rankings = {q.id: prior.rank_predicted(p, q.candidates, 5).indices for q, p in zip(rows, predicted)}
    order = [int(i) for i in prior.meta.get("constant_order", [])] or None
    found = {"prior": score(rankings, qrels)}
    if order:
        found["constant"] = score({q.id: order for q in rows}, qrels)
    found["cascade_llm_share"] = {"queries": len(rows), "share": float((confidence < prior.threshold).mean())}
    Console().print(metrics_table({k: v for k, v in found.items() if "ndcg@5" in v}))
    typer.echo(json.dumps(found))


@icl_app.command("build")
def icl_build(
    input: Annotated[str, typer.Argument(help="Training rows with qrels (document or chunk rows).")],
    out: OutOpt,
    exclude: ExcludeOpt = None,
    embedder_name: Annotated[
        str | None, typer.Option("--embedder", help="hashed, minilm, or an embeddings model (PRISM_EMBEDDER).")
    ] = None,
) -> None:
    """Embed every training question with its gold ranking into a FAISS index, saved as plain
    files with a checksum. API embeddings go through the gateway and are priced."""
    from prism.llm import recording
    from prism.ranking.embeddings import embedder as make_embedder
    from prism.ranking.icl import ExampleStore
    from workers.runtime import Runtime

    settings = settings_with({})
    rows, held_out = _training_rows(input, exclude or [], settings)
    name = embedder_name or settings.embedder
    with recording() as calls:
        store = ExampleStore.build(rows, make_embedder(name, Runtime(settings).gateway))
    target = open_store(out, settings)
    for file, data in store.to_files().items():
        target.put(file, data)
    usd = sum(c.usd or 0 for c in calls)
    console.print(
        f"{store.meta['count']} examples ({len(held_out)} held-out rows excluded), {name} embeddings of "
        f"{store.meta['dim']} dimensions, {len(calls)} API calls, USD {float(usd):.4f}: {out}"
    )


def exporter(port: Annotated[int, typer.Option(help="Port for /metrics.")] = 9808) -> None:
    """Serve the fleet's Prometheus metrics (jobs, LLM calls, tokens, USD, 429s, limiter waits,
    queue depth), read from Redis at each scrape."""
    import redis
    from prometheus_client import REGISTRY, start_http_server

    from workers.metrics import FleetCollector

    settings = settings_with({})
    if not settings.shared_redis:
        raise RunError(
            f"the exporter reads the fleet's counters from Redis: set {named('broker_url')} or {named('redis_url')}"
        )
    REGISTRY.register(FleetCollector(redis.Redis.from_url(settings.shared_redis)))
    start_http_server(port)
    console.print(f"serving fleet metrics on :{port}/metrics")
    while True:
        time.sleep(3600)


def _training_rows(input: str, exclude: list[str], settings: Settings) -> tuple[list[Query], list[Query]]:
    """The rows of INPUT less any whose id or question is in an --exclude file, and those held out."""
    held_out = [q for path in exclude for q in _read(path, settings)]
    ids, questions = {q.id for q in held_out}, {q.question for q in held_out}
    return [q for q in _read(input, settings) if q.id not in ids and q.question not in questions], held_out


def _read(uri: str, settings: Settings) -> list[Query]:
    """The valid queries of a file (training rows for the prior or the examples)."""
    from functools import partial

    from prism.datasets import Query, read_input

    return [q for q in read_input(uri, partial(open_input, uri, settings)) if isinstance(q, Query)]
