"""The run viewer at scale: a question-set run's static export and how soon its pages answer in a
real browser (Debian's chromium, driven by Playwright).

The runs are synthesized, not ranked (the viewer reads results, not how they were made): each
question asks about one of the 74 FinanceBench filings (real pages, ingested from the page rows)
and gets five evidence rows on real chunks of it, cited as a worker cites them (the passage and
its offsets in the page). Then:

- `export_s_per_1000q`, `export_mb_per_1000q`: `prism view --out` of a 1,000-question run, its
  seconds and megabytes; the export carries the cited pages' text only. Every row's page and its
  passage (the text its offsets mark) are checked to be in the export, so the size cannot be met
  by dropping pages.
- `list_interactive_ms`: the run page of a 10,000-question run, from navigation until the first
  row is visible and `j` has moved the selection, as Playwright observes them, from file://.
- `question_interactive_ms`: a question page, until its first row and passage are shown and `j`
  has moved the selection.

    python bench/viewer.py [--quick]
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import PAGES, SHARED, parser, report

from prism.models import JobResult, QuestionPlan, Ranking, RunConfig, RunManifest
from prism.ranking.lexical import cite
from prism.runs.planning import pair_id
from producer.ingest import ingest_source
from producer.view.site import export
from workers.corpus import Corpus
from workers.runfiles import RunFiles, RunLayout
from workers.store import LocalStore, put_model

KEYS = ("export_s_per_1000q", "export_mb_per_1000q", "list_interactive_ms", "question_interactive_ms")
DOC_INFO = SHARED / "financebench" / "financebench_document_information.jsonl"
WORDS = ("revenue", "cash", "debt", "margin", "dividends", "guidance", "segment", "tax", "inventory", "risk")
CHROMIUM = "/usr/bin/chromium"


def synthesize(corpus: Corpus, results: LocalStore, run_id: str, questions: int, seed: int = 7) -> None:
    """A finished question-set run of ``questions`` questions over the corpus, five rows each."""
    rng, files = random.Random(seed), RunFiles(results, run_id)
    entries = list(corpus.catalog.all_filings().values())
    loaded: dict[str, tuple] = {}
    plans, rows = [], []
    for i in range(questions):
        entry = rng.choice(entries)
        if entry.id not in loaded:
            filing = corpus.get_filing(entry.id)
            loaded[entry.id] = (filing, filing.page_offsets(), [c for c in filing.chunks if c.page is not None])
        filing, offsets, paged = loaded[entry.id]
        question = f"What did {entry.meta.company or entry.id} report about {rng.choice(WORDS)} ({i})?"
        chunks = rng.sample(paged, min(5, len(paged)))
        pid, qid = pair_id(f"q{i}", entry.id), f"q{i}"
        ranking = Ranking(
            indices=[c.index for c in chunks], scores=[5.0 - r for r in range(len(chunks))], ranker="financial"
        )
        now = datetime.now(UTC)
        cited = [cite(question, c, offsets[c.index]) for c in chunks]
        result = JobResult(
            run_id=run_id,
            job_id=pid,
            query_id=pid,
            task="chunks",
            ranker="financial",
            n_candidates=len(filing.chunks),
            ranking=ranking,
            started_at=now,
            finished_at=now,
            cited=cited,
        )
        put_model(results, RunLayout(run_id).result("chunks", pid), result)
        plan = QuestionPlan(
            question_id=qid, question=question, line=i + 1, scope={"company": entry.meta.company}, period="latest"
        )
        plans.append(
            plan.model_dump(mode="json") | {"filings": [{"filing": entry.id, "rank": 1, "score": 1.0, "reason": ""}]}
        )
        rows.append(
            {
                "question_id": qid,
                "query_id": pid,
                "task": "chunks",
                "state": "done",
                "line": i + 1,
                "filing": entry.id,
                "version": entry.latest,
                "filing_rank": 1,
                "filing_score": 1.0,
            }
        )
    files.put_questions(plans)
    files.put_plan(rows)
    created = datetime.now(UTC)
    manifest = RunManifest(
        run_id=run_id,
        status="complete",
        input="synthesized",
        results=results.uri,
        created_at=created,
        finished_at=created,
        config=RunConfig(),
        settings={},
        code_version="bench",
        embedded=True,
        corpus=corpus.store.uri,
        counts={"questions": questions, "done": questions},
    )
    files.put_manifest(manifest)


def checked(site: Path) -> int:
    """Every row's page is in the export and its offsets mark its passage there; how many rows."""
    rows = 0
    for script in (site / "data" / "q").glob("*.js"):
        data = json.loads(script.read_text().split("PRISM.question(", 1)[1].split(", ", 1)[1].rsplit(");", 1)[0])
        for row in data["rows"]:
            page = (site / "data" / "p" / f"{row['page_id']}.js").read_text()
            text = json.loads(page.split(", ", 1)[1].rsplit(");", 1)[0])
            assert " ".join(text[row["start"] : row["end"]].split()) == row["excerpt"], (script.name, row["rank"])
            rows += 1
    return rows


def timed(browser, url: str, first: str, moved: str) -> float:
    """Milliseconds from navigation until ``first`` is visible and `j` has selected ``moved``."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    started = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_selector(first, state="visible")
    page.keyboard.press("j")
    page.wait_for_selector(moved)
    elapsed = 1000 * (time.perf_counter() - started)
    page.close()
    return elapsed


def browse(site: Path, tries: int = 5) -> tuple[float, float]:
    """The run page's and a question page's interactive time, the median of ``tries`` loads each."""
    from playwright.sync_api import sync_playwright

    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        index = (site / "index.html").as_uri()
        lists = [timed(browser, index, "#questions li", "#questions li:nth-child(2).selected") for _ in range(tries)]
        question = (site / "question.html").as_uri() + "?n=123&id=q123"
        pages = [timed(browser, question, "li.row pre.page mark", "li.row:nth-child(2).selected") for _ in range(tries)]
        browser.close()
    return statistics.median(lists), statistics.median(pages)


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    small, large = (100, 1000) if quick else (1000, 10_000)
    with tempfile.TemporaryDirectory(prefix="prism-viewer-") as tmp:
        work = Path(tmp)
        corpus = Corpus(LocalStore(work / "corpus"))
        ingest_source(PAGES, corpus.store, meta=DOC_INFO)
        results = LocalStore(work / "results")
        synthesize(corpus, results, "small", small)
        size, seconds = export(RunFiles(results, "small"), corpus, "https://www.sec.gov", work / "small")
        rows = checked(work / "small")
        print(f"{small} questions: {rows} rows checked, {size / 1e6:.1f} MB in {seconds:.1f} s", flush=True)
        synthesize(corpus, results, "large", large, seed=11)
        large_size, large_seconds = export(RunFiles(results, "large"), corpus, "https://www.sec.gov", work / "large")
        print(f"{large} questions: {large_size / 1e6:.1f} MB in {large_seconds:.1f} s", flush=True)
        list_ms, question_ms = browse(work / "large")
        shutil.rmtree(work / "large")
    per = 1000 / small
    report(
        export_s_per_1000q=round(seconds * per, 2),
        export_mb_per_1000q=round(size / 1e6 * per, 2),
        list_interactive_ms=round(list_ms),
        question_interactive_ms=round(question_ms),
        questions_listed=large,
        rows_checked=rows,
    )


if __name__ == "__main__":
    main()
