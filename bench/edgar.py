"""Real EDGAR filings against their page truth (shared/data/edgar: 11 filings from edgartools'
fixtures, SOURCE.md): what ingest makes of them with no metadata file, and how a question set
over them ranks, at $0 and on the fleet.

    python bench/edgar.py [--no-fleet] [--chunk-ranker NAME] [--noise 0.2]

- Ingest: the folder in-process (one worker, no metadata file). Per filing, against truth.jsonl:
  physical pages (`pages_exact`), the readable documents with their first and last page
  (`documents_exact`), and the identity read from the file: company (`meta_company`, by
  prism.runs.questions.company_key; a combined filing "A / B" matches either), form type
  (`meta_form`), period end (`meta_period`). A filing that misses anything gets a line saying what.
- The question set: the 37 questions (company scope, one qrel page each) over that corpus,
  embedded, at $0 (the default chunk ranker, no LLM): filing_top1, evidence recall@5, NDCG@5
  over (filing, page), and how many questions found no filing in scope.
  A question whose answer page is not among the first five pages cited gets a line saying what was.
- `ingest_pages_per_s`: the HTML files' stored pages over the seconds one process takes to
  ingest them alone: the speed of HTML parsing and page splitting.
- Unless --no-fleet: the same question set on the fleet (SeaweedFS, Redis DB 9 on 127.0.0.1:6379,
  two celery workers), form types and chunks ranked by the LLM path on the oracle simulator
  (noise 0.2, as bench/corpus.py). The oracle knows only the qrel: the chunks stored on the qrel
  page grade 2, and for the form types the truth form of the qrel filing grade 2 when it is one of
  the five types; it checks the pipeline around the LLM (identity, filing choice, pages), not a model.

The last line is the figures.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import SHARED, ended, parser, report

from prism.corpus.companies import company_key
from prism.ingest.accession import accession_of
from producer.ingest import ingest_source
from workers.corpus import Corpus
from workers.store import LocalStore, Store

EDGAR = SHARED / "edgar"
FILINGS = EDGAR / "filings"
TRUTH = EDGAR / "truth.jsonl"
QUESTIONS = EDGAR / "questions.jsonl"
HTML = (".html", ".htm")
FLEET_REDIS_DB = 9  # a DB no other benchmark or the tests use: it is flushed
KEYS = (
    "pages_exact",
    "documents_exact",
    "meta_company",
    "meta_form",
    "meta_period",
    "accession_exact",
    "filing_top1",
    "evidence_ndcg5",
)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def form_key(text: Any) -> str:
    """A form type as compared: case-insensitive, whitespace collapsed."""
    return " ".join(str(text).split()).casefold() if text else ""


# -- ingest against truth ----------------------------------------------------------------------


def truth_documents(truth: dict) -> list[tuple[str, int, int]]:
    """Truth's readable documents in order: (type, first page, last page)."""
    return [
        (form_key(d.get("type")), d["pages"][0], d["pages"][1])
        for d in truth.get("documents") or []
        if d.get("pages") is not None
    ]


def stored_documents(filing: Any, truth: dict) -> list[tuple[str, int, int]]:
    """The filing's readable documents as truth lists them. A single file (truth's documents name
    no file) may store none: it is then one document of its form type over all its pages."""
    documents = getattr(filing, "documents", None) or []
    single = all("filename" not in d for d in truth.get("documents") or [])
    if not documents and single:
        form = getattr(getattr(filing, "meta", None), "form_type", None)
        return [(form_key(form), 1, getattr(filing, "pages", 0))] if form else []
    found = []
    for d in documents:
        pages = getattr(d, "pages", None)
        if pages is not None:
            found.append((form_key(getattr(d, "type", "")), pages[0], pages[1]))
    return found


def company_matches(stored: str | None, truth: str | None) -> bool:
    if not stored or not truth:
        return False
    key = company_key(stored)
    parts = [truth, *(p.strip() for p in truth.split(" / "))] if " / " in truth else [truth]
    return bool(key) and any(key == company_key(p) for p in parts)


def period_matches(stored: Any, truth: str | None) -> bool:
    """A date (or None) against an ISO string (or null); null against None is a match."""
    if stored is None or truth is None:
        return stored is None and truth is None
    iso = stored.isoformat() if hasattr(stored, "isoformat") else str(stored)
    return iso[:10] == truth


def _failure(corpus: Corpus, name: str) -> str:
    """Why a file gave no filing, from the corpus manifest's failures."""
    try:
        failures = corpus.catalog.failures()
    except Exception as err:  # noqa: BLE001 - a detail line must not stop the benchmark
        return f"no manifest ({err})"
    for key, failure in failures.items():
        source = getattr(failure, "source", key)
        if str(source).endswith(name) or str(key).endswith(name):
            return f"ingest failed: {getattr(failure, 'reason', '?')}"
    return "not in the corpus and no failure recorded"


def accession_exact(filings: dict[str, Any], truths: list[dict]) -> float:
    """The share of the filings that state an accession number (their repository path names it:
    SOURCE.md) whose identity holds that number."""
    stated = [(Path(t["file"]).stem, accession_of(t["file"])) for t in truths if accession_of(t["file"])]
    found = [getattr(getattr(filings.get(fid), "meta", None), "accession", None) == number for fid, number in stated]
    for (fid, number), ok in zip(stated, found, strict=True):
        if not ok:
            print(f"accession miss: {fid} wants {number}", flush=True)
    return sum(found) / len(found) if found else 0.0


def check_filings(corpus: Corpus, truths: list[dict]) -> tuple[dict[str, float], dict[str, Any]]:
    """The shares of filings whose pages, documents, company, form and period match truth; the
    filings read (by id); a line for each filing that misses something."""
    hits = {"pages": 0, "documents": 0, "company": 0, "form": 0, "period": 0}
    filings: dict[str, Any] = {}
    for truth in truths:
        name = truth["file"]
        fid = Path(name).stem
        try:
            filing = corpus.get_filing(fid)
        except Exception as err:  # noqa: BLE001 - a filing that cannot be read is a miss, said why
            print(f"miss file={name} {_failure(corpus, name)} ({type(err).__name__}: {err})", flush=True)
            continue
        filings[fid] = filing
        meta = getattr(filing, "meta", None)
        pages = getattr(filing, "pages", 0)
        docs, want_docs = stored_documents(filing, truth), truth_documents(truth)
        company, form = getattr(meta, "company", None), getattr(meta, "form_type", None)
        period = getattr(meta, "period_end", None)
        ok = {
            "pages": pages == truth.get("pages"),
            "documents": docs == want_docs,
            "company": company_matches(company, truth.get("company")),
            "form": bool(form) and form_key(form) == form_key(truth.get("form")),
            "period": period_matches(period, truth.get("period_end")),
        }
        for k, v in ok.items():
            hits[k] += int(v)
        if not all(ok.values()):
            chunks = getattr(filing, "chunks", []) or []
            paged = sum(1 for c in chunks if getattr(c, "page", None) is not None)
            cik = getattr(meta, "cik", None)
            print(
                f"miss file={name} fails={','.join(k for k, v in ok.items() if not v)}"
                f" kind={getattr(filing, 'kind', '?')} pages={pages}/{truth.get('pages')}"
                f" chunks={len(chunks)} paged_chunks={paged}"
                f" documents={_docs(docs)}/{_docs(want_docs)}"
                f" company={company!r}/{truth.get('company')!r} form={form!r}/{truth.get('form')!r}"
                f" period={period}/{truth.get('period_end')} cik={cik}/{truth.get('cik')}",
                flush=True,
            )
    n = len(truths) or 1
    return {k: v / n for k, v in hits.items()}, filings


def _docs(docs: list[tuple[str, int, int]]) -> str:
    return "[" + ",".join(f"{t}:{a}-{b}" for t, a, b in docs) + "]"


# -- the question set -------------------------------------------------------------------------


def question_set(path: Path, questions: list[dict]) -> None:
    with path.open("w") as out:
        for q in questions:
            record = {k: q[k] for k in ("id", "question", "scope", "qrels", "answer") if k in q}
            out.write(json.dumps(record) + "\n")


def _lines(store: Store, key: str) -> list[dict]:
    try:
        data = store.get(key)
    except KeyError:
        return []
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def evidence_table(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def misses(rows: list[dict], questions: list[dict]) -> list[str]:
    """The questions whose qrel page is not among the first five pages cited, with what was cited."""
    cited: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: (r.get("question_id", ""), int(r.get("rank") or 0))):
        cited.setdefault(r.get("question_id", ""), []).append(f"{r.get('filing_id', '')}:{r.get('page', '')}")
    out = []
    for q in questions:
        want = {f"{g['filing']}:{g['page']}" for g in q.get("qrels") or [] if g.get("grade", 0) > 0}
        top = list(dict.fromkeys(cited.get(q["id"], [])))[:5]
        if not want & set(top):
            out.append(f"{q['id']} wants {','.join(sorted(want))} cited {' '.join(top) or 'nothing'}")
    return out


def zero_dollar_run(work: Path, questions: Path, chunk_ranker: str | None) -> dict[str, Any]:
    """The question set embedded, no LLM and no broker (the environment's PRISM_ and OPENAI_
    settings are dropped): its evidence metrics, failures and evidence rows."""
    for key in list(os.environ):
        if key.startswith(("PRISM_", "OPENAI_")) and key != "PRISM_SHARED_DATA":
            del os.environ[key]
    os.environ["PRISM_RESULTS"] = str(work / "results")
    if chunk_ranker:
        os.environ["PRISM_CHUNK_RANKER"] = chunk_ranker
    from rich.console import Console

    from producer.config import resolved_config
    from producer.reader import new_run_id
    from producer.runs import Runs
    from producer.spec import RunSpec
    from workers import logs
    from workers.runfiles import RunLayout
    from workers.settings import load_settings

    settings = load_settings()
    logs.configure("WARNING")  # as `prism run` does when embedded
    config = resolved_config(settings)
    spec = RunSpec(
        run_id=new_run_id(),
        input=str(questions),
        results=settings.results,
        config=config,
        corpus=str(work / "corpus"),
    )
    end = Runs(settings, Console(stderr=True, quiet=True)).start(spec, wait=True, timeout=None)
    results, layout = LocalStore(work / "results"), RunLayout(spec.run_id)
    failures = _lines(results, layout.file("failures.jsonl"))
    no_filing = [f for f in failures if str(f.get("error", "")).startswith("no filing in scope")]
    try:
        rows = evidence_table(results.get(layout.file("evidence.csv")))
    except KeyError:
        rows = []
    return {
        "metrics": end.metrics.get("questions", {}),
        "failed": len(failures) - len(no_filing),
        "no_filing": sorted(str(f.get("query_id") or f.get("id") or "?") for f in no_filing),
        "rows": rows,
        "evidence_rows": len(rows),
        "empty_page_rows": sum(1 for r in rows if not (r.get("page") or "").strip()),
        "chunk_ranker": config.chunk_ranker,
    }


# -- HTML ingest speed --------------------------------------------------------------------------


def html_ingest(work: Path) -> dict[str, Any]:
    """The HTML files alone, ingested in this process: their stored pages and the wall time."""
    paths = sorted(p for p in FILINGS.iterdir() if p.is_file() and p.suffix.lower() in HTML)
    store = LocalStore(work / "html-corpus")
    started = time.perf_counter()
    summary = ingest_source(paths, store)
    wall = time.perf_counter() - started
    corpus, pages = Corpus(store), 0
    for fid in summary.filings:
        try:
            pages += getattr(corpus.get_filing(fid), "pages", 0)
        except Exception:  # noqa: BLE001 - a filing that cannot be read adds no pages
            pass
    return {
        "files": len(paths),
        "pages": pages,
        "seconds": wall,
        "mb": sum(p.stat().st_size for p in paths) / 1e6,
        "failed": summary.failed,
    }


# -- the oracle fleet --------------------------------------------------------------------------


def oracle_queries(questions: list[dict], filings: dict[str, Any], truths: list[dict]) -> tuple[list, list[str]]:
    """The simulator's graded queries, keyed by question text: the stored chunks on each qrel
    page (grade 2) among the qrel filing's chunks, and the qrel filing's truth form among the five
    types when it is one. Also what the oracle could not be told, and why."""
    from prism.models import FILING_TYPES, Query

    forms = {Path(t["file"]).stem: t.get("form") for t in truths}

    def squash(text: Any) -> str:
        return re.sub(r"[\s-]+", "", str(text or "")).upper()

    types = {squash(t): i for i, t in enumerate(FILING_TYPES)}
    queries, unknown = [], []
    for q in questions:
        pages: dict[str, dict[int, int]] = {}  # qrel filing -> page -> grade
        for r in q.get("qrels") or []:
            if r.get("page") is not None:
                pages.setdefault(r["filing"], {})[r["page"]] = int(r["grade"])
        qrel: dict[int, int] = {}
        candidates: list[str] = []
        for fid, grades in pages.items():
            filing = filings.get(fid)
            if filing is None:
                unknown.append(f"{q['id']}: {fid} not in the corpus")
                continue
            chunks = getattr(filing, "chunks", []) or []
            offset = len(candidates)
            candidates += [c.text for c in chunks]
            for i, c in enumerate(chunks):
                page = getattr(c, "page", None)
                if page is not None and grades.get(page, 0) > 0:
                    qrel[offset + i] = grades[page]
            missing = sorted(set(grades) - {getattr(c, "page", None) for c in chunks})
            if missing:
                unknown.append(f"{q['id']}: no stored chunk on page {','.join(map(str, missing))} of {fid}")
            form = types.get(squash(forms.get(fid)))
            if form is not None:
                queries.append(
                    Query(
                        id=f"{q['id']}/documents",
                        task="documents",
                        question=q["question"],
                        candidates=list(FILING_TYPES),
                        qrel={form: max(grades.values())},
                    )
                )
        if candidates and qrel:
            queries.append(
                Query(
                    id=f"{q['id']}/chunks",
                    task="chunks",
                    question=q["question"],
                    candidates=candidates,
                    qrel=qrel,
                    answer=q.get("answer"),
                )
            )
    return queries, unknown


def oracle_fleet(work: Path, questions: Path, corpus_store: LocalStore, queries: list, noise: float) -> dict:
    """The question set on the fleet (PRISM_CHUNK_RANKER=llm, documents by the LLM too) over a copy
    of the corpus in S3, on the oracle simulator."""
    from _common import Fleet

    from prism.testing.simulator import Simulator, SimulatorConfig
    from workers.store import S3Store
    from workers.testing import prism_cli

    with Simulator(SimulatorConfig(mode="oracle", noise=noise, seed=7)) as sim:
        sim.add_queries(queries)
        with Fleet(sim, work / "fleet", redis_db_index=FLEET_REDIS_DB) as fleet:
            s3 = S3Store(fleet.bucket, "corpus", fleet.s3.client())
            for key in corpus_store.keys(""):
                s3.put(key, corpus_store.get(key))
            fleet.start_workers(2, concurrency=1)
            args = ["run", "--questions", str(questions), "--corpus", s3.uri]
            args += ["--results", f"s3://{fleet.bucket}/prism", "--run-id", "oracle"]
            ended(prism_cli(args, fleet.env | {"PRISM_CHUNK_RANKER": "llm"}, fleet.workdir, timeout=1800))
            results = S3Store(fleet.bucket, "prism", fleet.s3.client())
            metrics = json.loads(results.get("runs/oracle/evidence_metrics.json"))
            cost = json.loads(results.get("runs/oracle/cost.json"))["total"]
            try:
                rows = evidence_table(results.get("runs/oracle/evidence.csv"))
            except KeyError:
                rows = []
            return metrics | {
                "calls": cost["calls"],
                "usd": cost["usd"],
                "requests": sim.stats["requests"],
                "rows": rows,
            }


def main() -> None:
    flags = parser(__doc__)
    flags.add_argument("--no-fleet", action="store_true", help="ingest and the $0 run only")
    flags.add_argument("--chunk-ranker", default=None, help="the $0 run's chunk ranker (default: the settings')")
    flags.add_argument("--noise", type=float, default=0.2, help="the oracle's share of random grades")
    args = flags.parse_args()
    truths, questions = read_jsonl(TRUTH), read_jsonl(QUESTIONS)[: 12 if args.quick else None]
    with tempfile.TemporaryDirectory(prefix="prism-edgar-") as tmp:
        work = Path(tmp)
        corpus_store = LocalStore(work / "corpus")
        summary = ingest_source(FILINGS, corpus_store)
        for failure in summary.failures:
            print(f"ingest failure: {failure}", flush=True)
        corpus = Corpus(corpus_store)
        shares, filings = check_filings(corpus, truths)
        report(
            filings=len(truths),
            stored=len(filings),
            ingest_failed=summary.failed,
            chunks=summary.chunks,
            ingest_s=summary.seconds,
        )

        html = html_ingest(work)
        rate = html["pages"] / html["seconds"] if html["seconds"] else 0.0
        report(
            html_files=html["files"],
            html_pages=html["pages"],
            html_failed=html["failed"],
            html_ingest_s=html["seconds"],
            html_mb_per_s=html["mb"] / html["seconds"] if html["seconds"] else 0.0,
        )

        question_set(work / "questions.jsonl", questions)
        run = zero_dollar_run(work, work / "questions.jsonl", args.chunk_ranker)
        m = run["metrics"]
        for line in misses(run["rows"], questions):
            print(f"miss at $0: {line}", flush=True)
        if run["no_filing"]:
            print(f"no filing in scope: {','.join(run['no_filing'])}", flush=True)
        report(
            questions=len(questions),
            judged=m.get("judged"),
            failed=run["failed"],
            no_filing_in_scope=len(run["no_filing"]),
            evidence_rows=run["evidence_rows"],
            evidence_rows_no_page=run["empty_page_rows"],
            chunk_ranker=run["chunk_ranker"],
        )

        oracle: dict[str, Any] = {}
        if not args.no_fleet:
            queries, unknown = oracle_queries(questions, filings, truths)
            for line in unknown:
                print(f"oracle knows nothing for {line}", flush=True)
            fleet = oracle_fleet(work, work / "questions.jsonl", corpus_store, queries, args.noise)
            report(
                oracle_graded_questions=sum(1 for q in queries if q.task == "chunks"),
                oracle_judged=fleet.get("judged"),
                oracle_no_filing_in_scope=fleet.get("no_filing_in_scope"),
                oracle_calls=fleet["calls"],
                oracle_usd=float(fleet["usd"]),
            )
            oracle = {
                "oracle_filing_top1": fleet.get("filing_top1"),
                "oracle_evidence_recall5": fleet.get("evidence_recall@5"),
                "oracle_evidence_ndcg5": fleet.get("evidence_ndcg@5"),
            }
        report(
            pages_exact=shares["pages"],
            documents_exact=shares["documents"],
            meta_company=shares["company"],
            meta_form=shares["form"],
            meta_period=shares["period"],
            accession_exact=accession_exact(filings, truths),
            filing_top1=m.get("filing_top1"),
            evidence_recall5=m.get("evidence_recall@5"),
            evidence_ndcg5=m.get("evidence_ndcg@5"),
            ingest_pages_per_s=rate,
            **oracle,
        )


if __name__ == "__main__":
    main()
