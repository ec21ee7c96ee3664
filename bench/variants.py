"""Every variant of the method, end to end through the fleet (Redis, 2 `celery worker`
processes, the S3 server) against the oracle simulator, on 20 rows: 10 document rows and the
10 shortest FinanceBench filings. A variant passes when `prism run` completes every query
with no failure and its results and cost report are in S3.

Variants: prompts P1-P4; in-context examples for documents and for chunks; the agent
variants (documents: analyzer + type experts; chunks A1-A4); the hybrid workflow (agentic
documents, non-agentic chunks); the $0 hybrid ranker; the hybrid pre-filter; Selector/Adder
evidence rounds; and the document prior alone, as a cascade and fused.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from _common import DOC_DEV, PAGES, SHARED, Fleet, parser, report

from prism.datasets import parse_row
from prism.testing.simulator import Simulator, SimulatorConfig
from workers.testing import prism_cli

LLM = {"PRISM_DOC_RANKER": "llm", "PRISM_CHUNK_RANKER": "llm"}
VARIANTS = {
    **{p: LLM | {"PRISM_DOC_PROMPT": p, "PRISM_CHUNK_PROMPT": p} for p in ("p1", "p2", "p3", "p4")},
    "icl_documents": LLM | {"PRISM_ICL_DOCUMENTS": "5", "PRISM_ICL_INDEX": "{docs_index}"},
    "icl_chunks": LLM | {"PRISM_ICL_CHUNKS": "5", "PRISM_ICL_INDEX": "{pages_index}"},
    "agents_documents": {"PRISM_DOC_RANKER": "agents", "PRISM_CHUNK_RANKER": "lexical"},
    **{v: LLM | {"PRISM_CHUNK_RANKER": v} for v in ("a1", "a2", "a3", "a4")},
    "hybrid_workflow": {"PRISM_DOC_RANKER": "agents", "PRISM_CHUNK_RANKER": "llm"},
    "hybrid_ranker": {"PRISM_DOC_RANKER": "prior", "PRISM_CHUNK_RANKER": "hybrid"},
    "prefilter": LLM | {"PRISM_PREFILTER_KEEP": "10"},
    "selector_adder": LLM | {"PRISM_CHUNK_RANKER": "evidence"},
    "prior": LLM | {"PRISM_DOC_RANKER": "prior"},
    "cascade": LLM | {"PRISM_DOC_RANKER": "cascade"},
    "fuse": LLM | {"PRISM_DOC_RANKER": "fuse"},
}
QUICK = ("p4", "a1", "selector_adder", "cascade")  # --quick: one of each kind, on 2 + 2 rows
KEYS = ("variants_ok", "variants_total")


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    size = 2 if quick else 10
    variants = {name: VARIANTS[name] for name in QUICK} if quick else VARIANTS
    with gzip.open(PAGES, "rt") as f:
        page_lines = sorted(f, key=lambda line: json.loads(line)["n_chunks"])[:size]
    doc_lines = DOC_DEV.read_text().splitlines(keepends=True)[:size]
    rows = [parse_row(line, i) for i, line in enumerate(doc_lines + page_lines, 1)]
    ok, figures = 0, {}
    with tempfile.TemporaryDirectory() as tmp, Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(rows)
        with Fleet(sim, Path(tmp), PRISM_CACHE="false") as fleet:
            source = fleet.upload("variants.jsonl.gz", doc_lines + page_lines)
            indexes: dict[str, str] = {}
            for name, data, exclude in (
                ()
                if quick
                else (
                    ("docs_index", SHARED / "finagentbench" / "document_ranking_kaggle_dev_full.jsonl", DOC_DEV),
                    ("pages_index", PAGES, None),
                )
            ):
                out = f"s3://{fleet.bucket}/icl/{name}"
                args = ["icl", "build", str(data), "--out", out] + (["--exclude", str(exclude)] if exclude else [])
                built = prism_cli(args, fleet.env, Path(tmp))
                assert built.returncode == 0, built.stderr[-2000:]
                indexes[name] = out
            fleet.start_workers(2, concurrency=2)
            for name, env in variants.items():
                env = {k: v.format(**indexes) for k, v in env.items()}
                try:
                    run = fleet.run(
                        source, f"variant-{name}", "--fresh", **env
                    )  # rank anew: variants may share job ids
                except SystemExit as err:
                    print(f"{name}: FAILED {str(err)[-500:]}", flush=True)
                    continue
                counts, total = run["manifest"]["counts"], run["cost"]["total"]
                passed = (
                    run["manifest"]["status"] == "complete" and counts["done"] == len(rows) and counts["failed"] == 0
                )
                ok += passed
                client = fleet.s3.client()
                metrics = json.loads(
                    client.get_object(Bucket=fleet.bucket, Key=f"prism/runs/variant-{name}/metrics.json")["Body"].read()
                )
                for scope in ("documents", "chunks"):
                    if scope in metrics:
                        figures[f"{name}_{scope}_ndcg5"] = round(metrics[scope]["ndcg@5"], 4)
                figures[f"{name}_usd"] = round(float(total["usd"]), 5)
                print(
                    f"{name}: {'ok' if passed else 'FAILED'}; {counts['done']} done, {counts['failed']} failed, {total['calls']} LLM calls, USD {float(total['usd']):.4f}; "
                    + ", ".join(f"{k} {v['ndcg@5']:.3f}" for k, v in metrics.items() if "ndcg@5" in v),
                    flush=True,
                )
    report(variants_ok=ok, variants_total=len(variants), **figures)


if __name__ == "__main__":
    main()
