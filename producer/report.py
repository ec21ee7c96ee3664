"""What a run produced: progress, cost roll-ups, metrics, and the files that say so."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal

from pydantic import BaseModel

from prism.metrics import evaluate
from prism.models import CallRecord, Failure, JobResult, RunManifest, Task
from workers.store import RunLayout, Store, get_model, put_model


class RunState:
    """The stored results and failures of a run, read incrementally: each file once."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.layout = store, RunLayout(run_id)
        self.results: dict[str, JobResult] = {}
        self.failures: dict[str, Failure] = {}

    def poll(self) -> RunState:
        for key in self.store.keys(f"{self.layout.base}/results/"):
            if key not in self.results:
                self.results[key] = get_model(self.store, key, JobResult)
        for key in self.store.keys(f"{self.layout.base}/failures/"):
            if key not in self.failures:
                self.failures[key] = get_model(self.store, key, Failure)
        return self

    @property
    def job_failures(self) -> list[Failure]:
        """Failed jobs; a job that failed once and then succeeded on redelivery counts as done."""
        done = {(r.task, r.query_id) for r in self.results.values()}
        return [f for f in self.failures.values() if f.kind == "job" and (f.task, f.query_id) not in done]

    @property
    def input_failures(self) -> list[Failure]:
        return [f for f in self.failures.values() if f.kind == "input"]

    @property
    def finished(self) -> int:
        return len(self.results) + len(self.job_failures)

    def calls(self) -> Iterable[tuple[str, Task, CallRecord]]:
        for r in self.results.values():
            for c in r.calls:
                yield r.query_id, r.task, c
        for f in self.job_failures:
            for c in f.calls:
                yield f.query_id or "", f.task or "documents", c


class CostSummary(BaseModel):
    calls: int = 0
    attempts: int = 0
    failed_calls: int = 0
    unpriced_calls: int = 0  # their cost is unknown, not zero
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    usd: Decimal = Decimal(0)  # priced calls only
    llm_seconds: float = 0.0

    def add(self, call: CallRecord) -> None:
        self.calls += 1
        self.attempts += call.attempts
        self.failed_calls += call.error is not None
        self.unpriced_calls += call.usd is None and call.error is None
        self.prompt_tokens += call.usage.prompt_tokens
        self.cached_tokens += call.usage.cached_tokens
        self.completion_tokens += call.usage.completion_tokens
        self.usd += call.usd or 0
        self.llm_seconds += call.latency_s

    def usd_text(self) -> str:
        text = f"${self.usd:.4f}"
        return text + (f" + {self.unpriced_calls} unpriced call(s)" if self.unpriced_calls else "")


def cost_report(state: RunState) -> dict:
    """Per run, per task type, per stage, per model and per job; the totals are the sums of the
    per-call records in the result and failure files."""
    total, by_task, by_stage, by_model = CostSummary(), {}, {}, {}
    by_job: dict[tuple[Task, str], CostSummary] = {}
    for query_id, task, call in state.calls():
        for summary in (
            total, by_task.setdefault(task, CostSummary()), by_stage.setdefault(call.stage, CostSummary()),
            by_model.setdefault(call.model, CostSummary()), by_job.setdefault((task, query_id), CostSummary()),
        ):  # fmt: skip
            summary.add(call)

    def dump(groups: dict) -> dict:
        return {k: v.model_dump(mode="json") for k, v in sorted(groups.items())}

    return {
        "run_id": state.layout.run_id,
        "total": total.model_dump(mode="json"),
        "by_task": dump(by_task),
        "by_stage": dump(by_stage),
        "by_model": dump(by_model),
        "jobs": [{"task": t, "query_id": q, **s.model_dump(mode="json")} for (t, q), s in sorted(by_job.items())],
    }


def run_metrics(state: RunState, k: int = 5) -> dict[str, dict[str, float]]:
    """NDCG@k, MRR@k, MAP@k per task and over all queries, where the run has qrels."""
    try:
        qrels = {q: {int(i): g for i, g in rel.items()} for q, rel in json.loads(state.store.get(state.layout.file("qrels.json"))).items()}
    except KeyError:
        return {}
    rankings = {(r.task, r.query_id): r.ranking.indices for r in state.results.values()}
    tasks = {q: t for t, q in rankings}
    tasks |= {f.query_id: f.task for f in state.job_failures if f.query_id}
    out = {}
    for task in ("documents", "chunks"):
        judged = {q: rel for q, rel in qrels.items() if tasks.get(q) == task}
        if judged:
            out[task] = evaluate({q: rankings[(task, q)] for q in judged if (task, q) in rankings}, judged, k)
    if len(out) > 1:
        out["all"] = evaluate({q: rankings[(tasks[q], q)] for q in qrels if (tasks.get(q), q) in rankings}, qrels, k)
    return out


def finalize(state: RunState, manifest: RunManifest, planned_jobs: int | None = None) -> tuple[RunManifest, dict, dict]:
    """Write cost.json, failures.jsonl, metrics.json, report.md and the updated manifest."""
    state.poll()
    store, layout = state.store, state.layout
    cost, metrics = cost_report(state), run_metrics(state)
    planned = planned_jobs if planned_jobs is not None else manifest.counts.get("documents", 0) + manifest.counts.get("chunks", 0)
    failed = state.job_failures
    counts = manifest.counts | {
        "done": len(state.results), "failed": len(failed), "invalid_rows": len(state.input_failures),
        "pending": max(0, planned - len(state.results) - len(failed)),
    }  # fmt: skip
    now = datetime.now(UTC)
    manifest = manifest.model_copy(update={
        "status": "complete" if counts["pending"] == 0 else "incomplete", "finished_at": now, "counts": counts,
        "timings": manifest.timings | {"wall_s": round((now - manifest.created_at).total_seconds(), 3)},
    })  # fmt: skip
    lines = [f.model_dump_json() for f in [*state.input_failures, *failed]]
    store.put(layout.file("failures.jsonl"), ("\n".join(lines) + "\n" if lines else "").encode())
    store.put(layout.file("cost.json"), json.dumps(cost, indent=1).encode())
    store.put(layout.file("metrics.json"), json.dumps(metrics, indent=1).encode())
    store.put(layout.file("report.md"), markdown(manifest, cost, metrics, state).encode())
    put_model(store, layout.file("manifest.json"), manifest)
    return manifest, cost, metrics


def markdown(manifest: RunManifest, cost: dict, metrics: dict, state: RunState) -> str:
    c = manifest.counts
    out = [
        f"# Run {manifest.run_id}", "",
        f"- status: **{manifest.status}**; input `{manifest.input}`; results `{manifest.results}`",
        f"- queries: {c.get('documents', 0)} document, {c.get('chunks', 0)} chunk; done {c.get('done', 0)}, "
        f"failed {c.get('failed', 0)}, pending {c.get('pending', 0)}; invalid input rows {c.get('invalid_rows', 0)}",
        f"- rankers: documents `{manifest.config.doc_ranker}` ({manifest.config.doc_prompt}), chunks "
        f"`{manifest.config.chunk_ranker}` ({manifest.config.chunk_prompt}); wall time {manifest.timings.get('wall_s', 0):.1f} s",
        "", "## Cost", "",
        "| group | calls | attempts | prompt tokens | cached | completion tokens | USD | unpriced calls |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    rows = [("total", cost["total"])] + [(f"{kind} {k}", v) for kind in ("by_task", "by_stage", "by_model") for k, v in cost[kind].items()]
    for name, s in rows:
        out.append(
            f"| {name} | {s['calls']} | {s['attempts']} | {s['prompt_tokens']} | {s['cached_tokens']} | "
            f"{s['completion_tokens']} | {Decimal(s['usd']):.4f} | {s['unpriced_calls']} |"
        )
    if metrics:
        out += ["", "## Metrics (k = 5)", "", "| task | queries | NDCG@5 | MRR@5 | MAP@5 | missing |", "|---|---:|---:|---:|---:|---:|"]
        for task, m in metrics.items():
            out.append(f"| {task} | {m['queries']} | {m['ndcg@5']:.4f} | {m['mrr@5']:.4f} | {m['map@5']:.4f} | {m['missing']} |")
    flags = Counter(f for r in state.results.values() for f in r.ranking.flags)
    if flags:
        out += ["", "## Flags", "", *(f"- {flag}: {n} queries" for flag, n in sorted(flags.items()))]
    failures = [*state.input_failures, *state.job_failures]
    if failures:
        out += ["", f"## Failures ({len(failures)})", ""]
        out += [f"- {f.query_id or f'line {f.line}'}: {f.error}" for f in failures[:50]]
    return "\n".join(out) + "\n"
