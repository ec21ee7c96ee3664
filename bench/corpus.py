"""A FinanceBench question set over a corpus, at $0: the 74 filings inside the page-ranking rows
ingested once (pages as chunks, metadata from the document information), the 150 open-source
questions run with the company as their scope (the filing is chosen by the pipeline: the
filing-type prior and the period resolver), chunks ranked by BM25, embedded, no services. Qrels
are FinanceBench's evidence pages over (filing, page): evidence from another filing scores 0.

    python bench/corpus.py [--chunk-ranker financial|lexical|hybrid] [--no-fleet]

Then the same question set through the fleet (SeaweedFS, Redis, two celery worker processes) with
the LLM path on the oracle simulator (noise 0.2: a fifth of the grades replaced by random ones):
the `oracle_` keys. Each question's form types are ranked first by the LLM (document jobs), then
its filing is chosen and its pages ranked. The simulator ranks from FinanceBench's graded form
types and pages, so those keys check the pipeline around the LLM (document ranking, filing choice,
segments, aggregation, evidence), not a model.

evidence_page_num is 0-based (the derived rows' chunk index, checked against the page texts in
SOURCE.md); the question set gives 1-based pages, as a PDF viewer shows them.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tempfile
from pathlib import Path

from _common import PAGES, SHARED, ended, parser, report
from ingest import by_filing, row_layout_bytes

from prism.segmenting import TokenCounter
from producer.ingest import ingest_source
from workers.corpus import Corpus
from workers.store import LocalStore

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
QUESTIONS = SHARED / "financebench" / "financebench_open_source.jsonl"
DOC_RANKING = SHARED / "financebench" / "financebench_document_ranking.jsonl"  # graded filing types per question
KEYS = ("filing_top1", "evidence_recall5", "evidence_ndcg5", "event_questions")
QUICK_QUESTIONS = 20


def question_rows(limit: int | None) -> list[dict]:
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    return rows[:limit]


def page_rows(work: Path, questions: list[dict], quick: bool) -> Path:
    """The page rows to ingest: every filing's, or (quick) those of the questions' filings."""
    if not quick:
        return PAGES
    wanted = {q["doc_name"] for q in questions}
    kept = [line for doc, lines in by_filing(None).items() if doc in wanted for line in lines]
    path = work / "pages.jsonl.gz"
    path.write_bytes(gzip.compress("".join(kept).encode()))
    return path


def question_set(path: Path, rows: list[dict]) -> int:
    with path.open("w") as out:
        for q in rows:
            pages = sorted({e["evidence_page_num"] for e in q["evidence"]})
            record = {
                "id": q["financebench_id"],
                "question": q["question"],
                "scope": {"company": q["company"]},
                "qrels": [{"filing": q["doc_name"], "page": p + 1, "grade": 2} for p in pages],
                "answer": q["answer"],
            }
            out.write(json.dumps(record) + "\n")
    return len(rows)


def event_questions(plan: list[dict], evidence_csv: bytes, corpus: Corpus) -> dict[str, int]:
    """The questions whose evidence is in a current report (an 8-K) or an earnings release (its
    exhibit), how many searched that filing, and how many ranked it first."""
    forms = {fid: entry.meta.form_type for fid, entry in corpus.catalog.all_filings().items()}
    first: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(evidence_csv.decode())):
        first.setdefault(row["question_id"], row["filing_id"])
    wanted = {q["question_id"]: {r["filing"] for r in q["qrels"]} for q in plan}
    events = [q for q in plan if any(forms.get(f) in ("8-K", "Earnings") for f in wanted[q["question_id"]])]
    searched = [q for q in events if wanted[q["question_id"]] & {f["filing"] for f in q["filings"]}]
    return {
        "event_questions": len(events),
        "event_searched": len(searched),
        "event_top1": sum(first.get(q["question_id"]) in wanted[q["question_id"]] for q in events),
    }


def oracle_fleet(questions: Path, pages: Path, work: Path) -> dict:
    """The question set on the fleet, chunks ranked by the LLM path on the oracle simulator."""
    from _common import Fleet

    from prism.datasets import load_queries
    from prism.testing.simulator import Simulator, SimulatorConfig
    from workers.store import S3Store
    from workers.testing import prism_cli

    with Simulator(SimulatorConfig(mode="oracle", noise=0.2, seed=7)) as sim:
        sim.add_queries(load_queries(pages) + load_queries(DOC_RANKING))  # pages, and the form types
        with Fleet(sim, work / "fleet") as fleet:
            ingest_source(pages, S3Store(fleet.bucket, "corpus", fleet.s3.client()), meta=DOC_INFO)
            fleet.start_workers(2, concurrency=1)
            corpus, results = f"s3://{fleet.bucket}/corpus", f"s3://{fleet.bucket}/prism"
            args = [
                "run",
                "--questions",
                str(questions),
                "--corpus",
                corpus,
                "--results",
                results,
                "--run-id",
                "oracle",
            ]
            # A run that ends with failures (exit 3: questions whose company has no filing here) ended.
            ended(prism_cli(args, fleet.env | {"PRISM_CHUNK_RANKER": "llm"}, fleet.workdir, timeout=1800))
            client = fleet.s3.client()

            def get(name: str) -> dict:
                return json.loads(
                    client.get_object(Bucket=fleet.bucket, Key=f"prism/runs/oracle/{name}")["Body"].read()
                )

            metrics, cost = get("evidence_metrics.json"), get("cost.json")["total"]
            return metrics | {"calls": cost["calls"], "usd": cost["usd"], "requests": sim.stats["requests"]}


def main() -> None:
    flags = parser(__doc__)
    flags.add_argument("--chunk-ranker", default="financial")
    flags.add_argument("--no-fleet", action="store_true", help="the $0 path only")
    args = flags.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = question_rows(QUICK_QUESTIONS if args.quick else None)
        pages = page_rows(work, rows, args.quick)
        corpus_store = LocalStore(work / "corpus")
        summary = ingest_source(pages, corpus_store, meta=DOC_INFO)
        questions = question_set(work / "questions.jsonl", rows)
        os.environ.update({"PRISM_RESULTS": str(work / "results"), "PRISM_CHUNK_RANKER": args.chunk_ranker})
        from rich.console import Console

        from producer.config import resolved_config
        from producer.reader import new_run_id
        from producer.runs import Runs
        from producer.spec import RunSpec
        from workers.settings import load_settings

        settings = load_settings()
        spec = RunSpec(
            run_id=new_run_id(),
            input=str(work / "questions.jsonl"),
            results=settings.results,
            config=resolved_config(settings),
            corpus=str(work / "corpus"),
        )
        end = Runs(settings, Console(stderr=True, quiet=True)).start(spec, wait=True, timeout=None)
        m = end.metrics["questions"]
        results = LocalStore(work / "results")
        failures = [json.loads(line) for line in results.get(f"runs/{spec.run_id}/failures.jsonl").splitlines()]
        no_filing = [f for f in failures if f["error"].startswith("no filing in scope")]
        plan = [json.loads(line) for line in results.get(f"runs/{spec.run_id}/questions.jsonl").splitlines()]
        in_corpus = set(Corpus(corpus_store).catalog.all_filings())
        missing = [q for q in plan if not {r["filing"] for r in q["qrels"]} & in_corpus]
        missing_no_filing = sum(1 for q in missing if not q["filings"])
        events = event_questions(plan, results.get(f"runs/{spec.run_id}/evidence.csv"), Corpus(corpus_store))
        run_bytes = sum(len(results.get(k)) for k in results.keys(f"runs/{spec.run_id}/"))
        _, row_bytes = row_layout_bytes(pages, TokenCounter())
        report(
            filings=summary.ingested,
            questions=questions,
            judged=m["judged"],
            failed=len(failures) - len(no_filing),
            no_filing_in_scope=len(no_filing),
            filing_not_in_corpus=len(missing),
            filing_not_in_corpus_no_filing=missing_no_filing,
            corpus_bytes=Corpus(corpus_store).stored_bytes(),
            run_bytes=run_bytes,
            row_layout_bytes=row_bytes,
            chunk_ranker=args.chunk_ranker,
        )
        oracle = {}
        if not args.no_fleet:
            fleet = oracle_fleet(work / "questions.jsonl", pages, work)
            report(oracle_calls=fleet["calls"], oracle_usd=float(fleet["usd"]), oracle_judged=fleet["judged"])
            oracle = {
                "oracle_filing_top1": fleet["filing_top1"],
                "oracle_evidence_recall5": fleet["evidence_recall@5"],
                "oracle_evidence_ndcg5": fleet["evidence_ndcg@5"],
            }
        report(
            filings=summary.ingested,
            questions=questions,
            filing_top1=m["filing_top1"],
            **events,
            evidence_recall5=m["evidence_recall@5"],
            evidence_ndcg5=m["evidence_ndcg@5"],
            **oracle,
            stored_bytes_ratio=(Corpus(corpus_store).stored_bytes() + run_bytes) / row_bytes,
        )


if __name__ == "__main__":
    main()
