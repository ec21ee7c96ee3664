"""The files that say what a run produced: cost.json, failures.jsonl, pending.jsonl,
metrics.json, summary.json, report.md with its plots, and a question set's evidence; made here,
written by RunFiles with the manifest."""

from __future__ import annotations

from collections import Counter

from prism.models import RunManifest
from prism.runs.estimate import Estimate
from prism.runs.outcomes import CostSummary, usd_text
from prism.runs.reckoning import Figures
from producer import analysis, evidence
from workers.runfiles import ReportFiles
from workers.runstate import RunState


def compose(
    state: RunState,
    manifest: RunManifest,
    pending: list[dict],
    figures: Figures,
    estimate: Estimate | str | None = None,
) -> ReportFiles:
    """Every report file of a run, from what it came to (prism/runs/outcomes.py) and the manifest it is
    finalized with; whoever finalizes the run writes them with its manifest. A question set over
    a corpus also gets its evidence table and the metrics over its questions, and where an LLM
    ranked, its estimate (or why there is none) beside what it cost."""
    found, metrics = figures.evidence, figures.metrics
    runs = {state.run_id: (manifest, figures.summary)}
    text = markdown(manifest, figures.cost, metrics, state)
    if estimate is not None:
        text += estimate_markdown(estimate, manifest, state)
    if found is not None:
        text += evidence.markdown(*found)
    text += "\n" + analysis.markdown(runs, None)
    per_question = found[1].get("evidence_ndcg@5_by_question") if found is not None else None
    images, left_out = analysis.plots(runs, None, per_question)
    text += "".join(f"\n![{name}]({name})\n" for name in images)
    text += "".join(f"\n_{name} is left out: {why}._\n" for name, why in left_out.items())
    return ReportFiles(
        cost=figures.cost,
        summary=figures.summary,
        metrics=metrics,
        failures=[f.model_dump_json() for f in [*state.input_failures, *state.job_failures]],
        pending=pending,
        text=text,
        images=images,
        estimate={"error": estimate} if isinstance(estimate, str) else estimate.model_dump() if estimate else None,
        evidence=evidence.table(found[0]) if found is not None else None,
        evidence_metrics=found[1] if found is not None else None,
        jobs=sorted({r.job_id for r in state.results.values() if r.job_id}),
    )


def changes_text(c: dict) -> str:
    """What changed since the run a `--new` run starts from, in a line."""
    text = (
        f"since run {c['since']}: {c['new_filings']} new and {c['changed_filings']} changed filings, "
        f"{c['new_questions']} new and {c['changed_questions']} changed questions; "
        f"{c['questions_with_changed_filings']} questions planned again for a changed filing in scope, "
        f"{c['unchanged_questions']} unchanged (their results reused at $0)"
    )
    if c.get("questions_with_lost_results"):
        text += f", {c['questions_with_lost_results']} ranked again because an earlier result was gone"
    return text + ("" if c["same_config"] else "; the configuration changed, so every question is planned")


def estimate_markdown(estimate: Estimate | str, manifest: RunManifest, state: RunState) -> str:
    """What `prism estimate --questions` says of the run's question set, beside what the run
    recorded, per stage (the run's own system-prompt check left out: the estimate has none)."""
    out = ["", "## Estimate beside actual", ""]
    if isinstance(estimate, str):
        return "\n".join([*out, f"No estimate: {estimate}.", ""])
    actual: dict[str, CostSummary] = {}
    for _, task, call in state.calls():
        if task != "run":
            actual.setdefault(call.stage, CostSummary()).add(call)
    out += [
        "`prism estimate --questions` over this run's question set and corpus, made from the same "
        "settings before any call, against what the run's calls recorded (retries and fallbacks are "
        "in the actual only).",
        "",
        "| stage | calls: estimate | actual | prompt tokens: estimate | actual | ratio | output tokens: estimate | actual |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for stage in sorted(set(estimate.stages) | set(actual)):
        e, a = estimate.stages.get(stage), actual.get(stage, CostSummary())
        ratio = f"{a.prompt_tokens / e.prompt_tokens:.2f}" if e and e.prompt_tokens else "-"
        out.append(
            f"| {stage} | {e.calls if e else 0} | {a.calls} | {e.prompt_tokens if e else 0} | {a.prompt_tokens} | "
            f"{ratio} | {e.completion_tokens if e else 0} | {a.completion_tokens} |"
        )
    settings = manifest.settings
    tier = "batch" if manifest.config.via == "batch" else str(settings.get("service_tier") or "standard")
    key = f"{tier}_cached" if settings.get("prompt_cache_key", True) else tier
    if key in estimate.usd:
        out += [
            "",
            f"Estimated USD at the run's tier ({key.replace('_', ', with the provider cache')}): "
            f"${float(estimate.usd[key]):.4f}; the run's is in the cost table above.",
        ]
    return "\n".join(out) + "\n"


def _prompt_warnings(manifest: RunManifest) -> list[str]:
    """A model that drops the system prompt ranks blind to its instructions: said at the top."""
    failing = [check for check in manifest.prompt_checks if check.dropped is not False]
    if not failing:
        return []
    return ["", "## System prompt check", "", *(f"- **{check.text()}**" for check in failing)]


def markdown(manifest: RunManifest, cost: dict, metrics: dict, state: RunState) -> str:
    lines = [*_head(manifest), *_costs(cost), *_gaps(state), *_metrics(metrics), *_flags_and_failures(state)]
    return "\n".join(lines) + "\n"


def _head(manifest: RunManifest) -> list[str]:
    c, config = manifest.counts, manifest.config
    over = f"- question set over the corpus `{manifest.corpus}`" if manifest.corpus else None
    if over and manifest.changes:
        over += f"; {changes_text(manifest.changes)}"
    return [
        f"# Run {manifest.run_id}",
        "",
        f"- status: **{manifest.status}**{f' ({manifest.error})' if manifest.error else ''}; input `{manifest.input}`; "
        f"results `{manifest.results}`",
        f"- queries: {c.get('documents', 0)} document, {c.get('chunks', 0)} chunk; done {c.get('done', 0)}, "
        f"failed {c.get('failed', 0)}, pending {c.get('pending', 0)}; reused from earlier runs {c.get('reused', 0)}; "
        f"invalid input rows {c.get('invalid_rows', 0)}",
        f"- rankers: documents `{config.doc_ranker}` ({config.doc_prompt}), chunks `{config.chunk_ranker}` "
        f"({config.chunk_prompt}); prompt layout `{config.prompt_layout}`; wall time "
        f"{manifest.timings.get('wall_s', 0):.1f} s",
        *([over] if over else []),
        *[f"- {check.text()}" for check in manifest.prompt_checks if check.dropped is False],
        *_prompt_warnings(manifest),
    ]


def _costs(cost: dict) -> list[str]:
    out = [
        "",
        "## Cost",
        "",
        "| group | calls | cache hits | attempts | 429s | timeouts (prompt tokens sent, possibly billed) | prompt tokens "
        "| cached tokens | completion tokens | USD | unpriced calls |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [("total", cost["total"])] + [
        (f"{kind} {k}", v)
        for kind in ("by_task", "by_stage", "by_model", "by_tier")
        for k, v in cost.get(kind, {}).items()
    ]
    for name, s in rows:
        out.append(
            f"| {name} | {s['calls']} | {s['cached_calls']} | {s['attempts']} | {s['throttled']} | "
            f"{s['timeouts']} ({s.get('timed_out_prompt_tokens', 0)}) | {s['prompt_tokens']} | {s['cached_tokens']} | "
            f"{s['completion_tokens']} | {usd_text(s)} | {s['unpriced_calls']} |"
        )
    if levers := cost.get("savings_by_lever"):
        out += ["", _savings(levers, cost["total"])]
    return out


def _savings(levers: dict, total: dict) -> str:
    def usd(name: str) -> str:
        return f"${float(levers.get(name) or 0):.4f}"

    prior = f", the document prior {usd('document_prior_usd')} (estimated)" if levers.get("document_prior_usd") else ""
    saved = (
        f"Saved by the provider's prompt cache {usd('provider_cache_usd')}, the service tier "
        f"{usd('service_tier_usd')}, the response cache {usd('response_cache_usd')}{prior} (from the recorded usage)."
    )
    if total["usd_known"]:
        return f"At list price the calls made cost {usd('list_usd')}. {saved}"
    if float(levers.get("list_usd") or 0):  # what is priced, said as such
        unpriced = f"{total['unpriced_calls']} unpriced call(s)"
        return f"At list price the priced calls cost {usd('list_usd')}, the {unpriced} unknown. {saved}"
    return f"At list price the calls made cost {usd_text(total)}, and so what each lever saved."


def _gaps(state: RunState) -> list[str]:
    gaps = [(t, q, c) for q, t, c in state.calls() if c.prompt_token_gap is not None]
    if not gaps:
        return []
    return [
        "",
        f"## Prompt-token gaps ({len(gaps)} calls)",
        "",
        "The server counted under half of the prompt tokens sent: its chat format may drop the system prompt.",
        "",
        *(
            f"- {t} {q}: {c.stage} call to {c.model}, server counted {c.usage.prompt_tokens} tokens, "
            f"{c.prompt_token_gap} fewer than sent"
            for t, q, c in gaps[:20]
        ),
    ]


def _metrics(metrics: dict) -> list[str]:
    ranked = {task: m for task, m in metrics.items() if isinstance(m, dict) and "ndcg@5" in m}
    if not ranked:
        return []
    out = [
        "",
        "## Metrics (k = 5)",
        "",
        "| task | queries | NDCG@5 | MRR@5 | MAP@5 | missing |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for task, m in ranked.items():
        out.append(
            f"| {task} | {m['queries']} | {m['ndcg@5']:.4f} | {m['mrr@5']:.4f} | {m['map@5']:.4f} | {m['missing']} |"
        )
    return out


def _flags_and_failures(state: RunState) -> list[str]:
    out = []
    flags = Counter(f for r in state.results.values() for f in r.ranking.flags)
    if flags:
        out += ["", "## Flags", "", *(f"- {flag}: {n} queries" for flag, n in sorted(flags.items()))]
    failures = [*state.input_failures, *state.job_failures]
    if failures:
        out += ["", f"## Failures ({len(failures)})", ""]
        out += [f"- {f.query_id or f'line {f.line}'}: {f.error}" for f in failures[:50]]
    return out
