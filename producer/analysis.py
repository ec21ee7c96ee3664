"""Measuring runs the way the method is measured: quality per task, latency, tokens and cost,
and for repeated runs of one configuration mean, SD, CV and 95% CI, with Welch's t-test
between configurations; tables in markdown and plots as PNG."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from datetime import UTC, datetime
from itertools import combinations

from rich.console import Console

from prism.models import RunManifest
from prism.ranking.metrics import run_statistics, welch
from workers.store import Store

TASKS = ("documents", "chunks")


def compare(runs: dict[str, tuple[RunManifest, dict]]) -> dict:
    """Runs grouped by configuration: statistics of NDCG@5 per task and over all queries, and
    Welch's t-test between every two configurations (where each has two runs or more)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for run_id, (manifest, _) in runs.items():
        groups[label(manifest)].append(run_id)
    table: dict[str, dict] = {}
    for name, ids in groups.items():
        table[name] = {"runs": ids}
        for scope in (*TASKS, "all"):
            values = [runs[i][1]["metrics"][scope]["ndcg@5"] for i in ids if scope in runs[i][1]["metrics"]]
            if values:
                table[name][scope] = run_statistics(values)
    tests = []
    for a, b in combinations(groups, 2):
        for scope in (*TASKS, "all"):
            va = [runs[i][1]["metrics"][scope]["ndcg@5"] for i in groups[a] if scope in runs[i][1]["metrics"]]
            vb = [runs[i][1]["metrics"][scope]["ndcg@5"] for i in groups[b] if scope in runs[i][1]["metrics"]]
            if len(va) > 1 and len(vb) > 1:
                tests.append({"a": a, "b": b, "scope": scope} | welch(va, vb))
    return {"configurations": table, "welch": tests}


def label(manifest: RunManifest) -> str:
    c = manifest.config
    icl = "+".join(f"icl-{t[0]}{k}" for t, k in sorted(c.icl.items()) if k)
    parts = [
        f"docs {c.doc_ranker}" + (f"/{c.doc_prompt}" if c.doc_ranker in ("llm", "cascade", "fuse") else ""),
        f"chunks {c.chunk_ranker}" + (f"/{c.chunk_prompt}" if c.chunk_ranker == "llm" else ""),
        icl,
        f"prefilter {c.prefilter_keep}" if c.prefilter_keep else "",
        f"prefilter {c.prefilter_share:.0%} of tokens" if c.prefilter_share else "",
    ]
    return ", ".join(p for p in parts if p) + f" [{c.fingerprint()[:6]}]"


def markdown(runs: dict[str, tuple[RunManifest, dict]], comparison: dict | None) -> str:
    out = []
    for run_id, (manifest, s) in runs.items():
        out += [
            f"## {run_id}: {label(manifest)}",
            "",
            "| scope | queries | NDCG@5 | MRR@5 | MAP@5 |",
            "|---|---:|---:|---:|---:|",
        ]
        for scope, m in s["metrics"].items():
            if scope != "evidence":
                out.append(f"| {scope} | {m['queries']} | {m['ndcg@5']:.4f} | {m['mrr@5']:.4f} | {m['map@5']:.4f} |")
        if ev := s["metrics"].get("evidence"):
            out += [
                "",
                f"Evidence ({ev['queries']} queries): precision {ev['precision']:.3f}, recall {ev['recall']:.3f}"
                + (
                    f", answer EM {ev['exact_match']:.3f}, token F1 {ev['token_f1']:.3f}" if "exact_match" in ev else ""
                ),
            ]
        out += [
            "",
            "| task | latency min / Q1 / median / Q3 / max (s) | prompt tokens (mean) | completion tokens (mean) | USD | USD per 1,000 queries |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for task, lat in s["latency_s"].items():
            tok, usd = s["tokens"][task], s["cost"][task]
            five = " / ".join(f"{lat[k]:.2f}" for k in ("min", "q1", "median", "q3", "max"))
            if usd["unpriced_calls"]:  # never $0 when some of it is unknown
                spent = f"unknown ({usd['unpriced_calls']} unpriced call(s))"
                per_1000 = "unknown"
            else:
                spent, per_1000 = f"{usd['usd']:.4f}", f"{usd['usd_per_1000_queries']:.2f}"
            out.append(
                f"| {task} | {five} | {tok['prompt']} ({tok['prompt_mean']:.0f}) | {tok['completion']} ({tok['completion_mean']:.0f}) | "
                f"{spent} | {per_1000} |"
            )
        out.append("")
    if comparison:
        out += [
            "## Configurations",
            "",
            "| configuration | scope | runs | mean NDCG@5 | SD | CV | 95% CI |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for name, row in comparison["configurations"].items():
            for scope in (*TASKS, "all"):
                if st := row.get(scope):
                    out.append(
                        f"| {name} | {scope} | {st['n']} | {st['mean']:.4f} | {st['sd']:.4f} | {st['cv']:.2%} | {st['ci95_low']:.4f} - {st['ci95_high']:.4f} |"
                    )
        if comparison["welch"]:
            out += ["", "| a | b | scope | Welch t | p |", "|---|---|---|---:|---:|"]
            out += [
                f"| {t['a']} | {t['b']} | {t['scope']} | {t['t']:.3f} | {t['p']:.4f} |" for t in comparison["welch"]
            ]
        out.append("")
    return "\n".join(out)


MIN_BOX = 5  # jobs of one task a latency box is drawn from


def plots(
    runs: dict[str, tuple[RunManifest, dict]], comparison: dict | None, questions: dict[str, float] | None = None
) -> tuple[dict[str, bytes], dict[str, str]]:
    """Latency box plots, token bars, USD per 1,000 queries, NDCG@5 by configuration (a question
    set's: evidence NDCG@5 per judged question, ``questions``); and the plots left out, with why:
    one with nothing to show is not drawn (no empty axes at $0)."""
    names = list(runs)
    boxes = [(r, t, lat) for r in names for t, lat in runs[r][1]["latency_s"].items() if lat.get("jobs", 0) >= MIN_BOX]
    bars = [(f"{r[-12:]}\n{t}", s["tokens"][t]) for r in names for s in [runs[r][1]] for t in s["tokens"]]
    bars = [b for b in bars if b[1]["prompt"] or b[1]["completion"]]
    scopes = [(f"{r[-12:]} {k}", m["ndcg@5"]) for r in names for k, m in runs[r][1]["metrics"].items() if "ndcg@5" in m]
    left_out = {}
    if not boxes:
        left_out["latency.png"] = f"no task with {MIN_BOX} or more jobs ranked in the run: too few for a box"
    if not bars:
        left_out["tokens_cost.png"] = "no LLM tokens: every ranking was at $0"
    if not (comparison or scopes or questions):
        left_out["ndcg.png"] = "no NDCG@5: no query has qrels over its own candidates, no question over its filings"
    if len(left_out) == 3:
        return {}, left_out
    out = {}
    if boxes:
        out["latency.png"] = _latency(boxes)
    if bars:
        costs = [(f"{r[-12:]}\n{t}", c["usd_per_1000_queries"]) for r in names for t, c in runs[r][1]["cost"].items()]
        out["tokens_cost.png"] = _tokens_cost(bars, costs)
    if questions and not (comparison or scopes):
        out["ndcg.png"] = _ndcg_spread(questions)
    if comparison or scopes:
        out["ndcg.png"] = _ndcg_bars(comparison, scopes)
    return out, left_out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    _pyplot().close(fig)
    return buffer.getvalue()


def _latency(boxes: list) -> bytes:
    fig, ax = _pyplot().subplots(figsize=(7, 3.5))
    # A box from the five numbers (the per-job latencies are not kept here).
    five = [
        {"med": b["median"], "q1": b["q1"], "q3": b["q3"], "whislo": b["min"], "whishi": b["max"]} for *_, b in boxes
    ]
    ax.bxp([f | {"fliers": []} for f in five], showfliers=False)
    ax.set_xticks(range(1, len(boxes) + 1), [f"{r[-12:]}\n{t}" for r, t, _ in boxes], fontsize=7)
    ax.set_ylabel("job latency (s)")
    return _png(fig)


def _tokens_cost(bars: list, costs: list) -> bytes:
    fig, (left, right) = _pyplot().subplots(1, 2, figsize=(9, 3.5))
    xs = range(len(bars))
    left.bar(xs, [b[1]["prompt_mean"] for b in bars], label="prompt")
    left.bar(
        xs, [b[1]["completion_mean"] for b in bars], bottom=[b[1]["prompt_mean"] for b in bars], label="completion"
    )
    left.set_xticks(list(xs), [b[0] for b in bars], fontsize=7)
    left.legend(fontsize=7)
    left.set_ylabel("tokens per query")
    right.bar(range(len(costs)), [c[1] for c in costs], color="tab:green")
    right.set_xticks(range(len(costs)), [c[0] for c in costs], fontsize=7)
    right.set_ylabel("USD per 1,000 queries")
    return _png(fig)


def _ndcg_spread(questions: dict[str, float]) -> bytes:
    fig, ax = _pyplot().subplots(figsize=(7, 3.5))
    values = list(questions.values())
    ax.hist(values, bins=[i / 10 for i in range(11)], color="tab:blue")
    ax.axvline(sum(values) / len(values), color="tab:red", label=f"mean {sum(values) / len(values):.3f}")
    ax.set_xlabel(f"evidence NDCG@5 of each judged question ({len(values)})")
    ax.set_ylabel("questions")
    ax.legend(fontsize=7)
    return _png(fig)


def _ndcg_bars(comparison: dict | None, scopes: list) -> bytes:
    fig, ax = _pyplot().subplots(figsize=(7, 3.5))
    if comparison:
        picked = [
            (name, row["all"] if "all" in row else next((row[t] for t in TASKS if t in row), None))
            for name, row in comparison["configurations"].items()
        ]
        rows: list[tuple[str, dict]] = [(n, st) for n, st in picked if st]
        errors = [st["mean"] - st["ci95_low"] for _, st in rows]
        ax.bar(range(len(rows)), [st["mean"] for _, st in rows], yerr=errors, capsize=4)
        ax.set_xticks(range(len(rows)), [n[:40] for n, _ in rows], fontsize=6, rotation=20, ha="right")
    else:
        ax.bar(range(len(scopes)), [v for _, v in scopes])
        ax.set_xticks(range(len(scopes)), [n for n, _ in scopes], fontsize=7, rotation=20, ha="right")
    ax.set_ylabel("NDCG@5")
    ax.set_ylim(0, 1)
    return _png(fig)


def write_comparison(store: Store, compared: dict[str, tuple[RunManifest, dict]]) -> str:
    """Several runs compared, in reports/<time>/ of their store (comparison.json, report.md and
    its plots); returns that folder."""
    comparison = compare(compared)
    folder = "reports/" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    store.put(f"{folder}/comparison.json", json.dumps(comparison, indent=1).encode())
    text = "# Comparison\n\n" + markdown(compared, comparison)
    images, left_out = plots(compared, comparison)
    for name, image in images.items():
        store.put(f"{folder}/{name}", image)
        text += f"\n![{name}]({name})\n"
    text += "".join(f"\n_{name} is left out: {why}._\n" for name, why in left_out.items())
    store.put(f"{folder}/report.md", text.encode())
    Console(soft_wrap=True).print(text)
    return folder
