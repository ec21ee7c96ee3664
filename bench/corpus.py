"""A FinanceBench question set over a corpus, at $0: the 74 filings inside the page-ranking rows
ingested once (pages as chunks, metadata from the document information), the 150 open-source
questions run with the company as their scope (the filing is chosen by the pipeline: the
filing-type prior and the period resolver), chunks ranked by BM25, embedded, no services. Qrels
are FinanceBench's evidence pages over (filing, page): evidence from another filing scores 0.

    python bench/corpus.py [--chunk-ranker lexical|hybrid]

evidence_page_num is 0-based (the derived rows' chunk index, checked against the page texts in
SOURCE.md); the question set gives 1-based pages, as a PDF viewer shows them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from _common import PAGES, SHARED, report
from ingest import row_layout_bytes

from prism.segmenting import TokenCounter
from workers.corpus import Corpus, ingest_source
from workers.store import LocalStore

DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
QUESTIONS = SHARED / "financebench" / "financebench_open_source.jsonl"


def question_set(path: Path) -> int:
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunk-ranker", default="lexical")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_store = LocalStore(work / "corpus")
        summary = ingest_source(PAGES, corpus_store, meta=DOC_INFO)
        questions = question_set(work / "questions.jsonl")
        os.environ.update({"PRISM_RESULTS": str(work / "results"), "PRISM_CHUNK_RANKER": args.chunk_ranker})
        from rich.console import Console

        from producer.plan import RunSpec
        from producer.runs import Runs, new_run_id
        from workers.priors import with_prior
        from workers.settings import load_settings

        settings = load_settings()
        spec = RunSpec(
            run_id=new_run_id(),
            input=str(work / "questions.jsonl"),
            results=settings.results,
            config=with_prior(settings.run_config(), settings),
            corpus=str(work / "corpus"),
        )
        end = Runs(settings, Console(stderr=True, quiet=True)).start(spec, wait=True, timeout=None)
        m = end.metrics["questions"]
        results = LocalStore(work / "results")
        failures = [json.loads(line) for line in results.get(f"runs/{spec.run_id}/failures.jsonl").splitlines()]
        no_filing = [f for f in failures if f["error"].startswith("no filing in scope")]
        plan = [json.loads(line) for line in results.get(f"runs/{spec.run_id}/questions.jsonl").splitlines()]
        in_corpus = set(Corpus(corpus_store).manifest().filings)
        missing = [q for q in plan if not {r["filing"] for r in q["qrels"]} & in_corpus]
        missing_no_filing = sum(1 for q in missing if not q["filings"])
        run_bytes = sum(len(results.get(k)) for k in results.keys(f"runs/{spec.run_id}/"))
        _, row_bytes = row_layout_bytes(TokenCounter())
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
        report(
            filings=summary.ingested,
            questions=questions,
            filing_top1=m["filing_top1"],
            evidence_recall5=m["evidence_recall@5"],
            evidence_ndcg5=m["evidence_ndcg@5"],
            stored_bytes_ratio=(Corpus(corpus_store).stored_bytes() + run_bytes) / row_bytes,
        )


if __name__ == "__main__":
    main()
