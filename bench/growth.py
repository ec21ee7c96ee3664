"""Growth: how the cost of ingest and of a question run grows with the corpus and the question
set, on synthetic filings, and where the time goes when it is not CPU.

A synthetic corpus of N text filings (10-K, 10-Q, 8-K, DEF 14A and earnings releases of a few
invented companies, fiscal years 2019-2024, five to ten pages of financial prose, statements and
figures each) is written to a folder with its `metadata.jsonl`, and a question set of Q questions
about those companies (a metric and a period: a fiscal year, a quarter, a date or none), each
scoped to its company. Every `prism` command runs as a subprocess, embedded (no broker, no LLM:
the filing-type prior and the financial retriever, $0) unless said, and its CPU is read from its
own resource usage.

- `ingest_cpu_ratio`, `run_cpu_ratio`: wall seconds over CPU seconds (user + system, the command
  and its children) of `prism ingest FOLDER --corpus CORPUS` and of `prism run --questions Q
  --corpus CORPUS`, at the largest N and Q; 1.0 is a command that never waits.
- `plan_s_per_q`: the run manifest's `timings.plan_s` over the number of questions.
- `reingest_1_changed_s`, `reingest_share`: the largest folder ingested again with one file
  changed, in seconds and as a share of its first ingest; `reingest_growth`: that re-ingest's
  seconds over the smallest folder's (1.0: the cost follows the change, not the corpus);
  `fleet_reingest_share`: the same on the 2-worker fleet below (its workers warm, as a nightly
  fleet's are), against the fleet's first ingest of the folder.
- `new_night_files`: files written under the run folder by `prism run ... --new` over the
  unchanged corpus, right after the first run (a night with nothing new).
- `status_s`: `prism status RUN_ID` on the largest run.
- `question_set_150_embedded_s`, `first_result_s`: FinanceBench's 150 open-source questions over
  its 74 filings, as `bench/corpus.py` builds them: the run's wall, and the seconds from its start
  to its first finished question.
- `producer_cpu_share`: the largest question set on a fleet of two celery worker processes
  (concurrency 1; SeaweedFS, Redis, the simulator, still $0): the producer's CPU seconds over the
  producer's and both workers' (their process trees, read from /proc) during the run.

Every corpus size is ingested and every question set size run over the largest corpus (the
smallest also over the smallest corpus), each printed as it is measured; the last line holds the
figures, with the milliseconds a filing and a question at the smallest and largest sizes.

    python bench/growth.py [--filings 100,1000] [--questions 100,1000] [--quick: 30 and 30]
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from _common import ENDED, Fleet, parser, report

PRISM = str(Path(sys.executable).parent / "prism")
YEARS = range(2019, 2025)
CLK_TCK = os.sysconf("SC_CLK_TCK")
FLEET_REDIS_DB = 15  # apart from the tests' (11 and up) and the other benchmarks' (12, 13)
KEYS = ("ingest_cpu_ratio", "run_cpu_ratio", "plan_s_per_q", "producer_cpu_share", "reingest_share", "new_night_files")

COMPANIES = [
    "Acme Industrial Corp",
    "Bluewater Energy Inc",
    "Cedar Ridge Foods Co",
    "Dunmore Semiconductor Inc",
    "Eastgate Retail Group",
    "Fairhaven Health Systems",
    "Granite Peak Mining Ltd",
    "Harborline Logistics Inc",
    "Ironwood Software Corp",
    "Juniper Financial Holdings",
    "Kestrel Aerospace Inc",
    "Lakeshore Utilities Co",
    "Meridian Pharmaceuticals Inc",
    "Northfield Apparel Co",
    "Oakmont Chemicals Corp",
    "Pinecrest Media Group",
    "Quarry Hill Materials Inc",
    "Redstone Automotive Corp",
    "Silverline Telecom Inc",
    "Tidewater Beverages Co",
    "Upland Agriculture Corp",
    "Valleyview Insurance Group",
    "Westbrook Hotels Inc",
    "Yellowstone Rail Corp",
    "Zenith Medical Devices Inc",
]
# One company-year of filings: (form, quarter or number, file suffix).
SLOTS = [
    ("10-K", None, "10k"),
    ("10-Q", 1, "10q"),
    ("10-Q", 2, "10q"),
    ("10-Q", 3, "10q"),
    ("Earnings", 4, "earnings"),
    ("8-K", 1, "8k"),
    ("DEF14A", None, "def14a"),
    ("8-K", 2, "8k"),
]
PER_COMPANY = len(SLOTS) * len(YEARS)
LINE_ITEMS = [
    ("Total revenue", "revenue", 1.0),
    ("Cost of revenue", "cost", 0.58),
    ("Gross profit", "gross", 0.42),
    ("Research and development", "rnd", 0.07),
    ("Selling, general and administrative", "sga", 0.16),
    ("Operating income", "opinc", 0.19),
    ("Interest expense", "interest", 0.015),
    ("Income before income taxes", "pretax", 0.175),
    ("Provision for income taxes", "tax", 0.04),
    ("Net income", "net", 0.135),
]
BALANCE = [
    ("Cash and cash equivalents", 0.21),
    ("Accounts receivable, net", 0.14),
    ("Inventories", 0.11),
    ("Property, plant and equipment, net", 0.48),
    ("Total assets", 1.62),
    ("Accounts payable", 0.09),
    ("Long-term debt", 0.44),
    ("Total liabilities", 0.93),
    ("Total stockholders' equity", 0.69),
]
CASH = [
    ("Net cash provided by operating activities", 0.17),
    ("Capital expenditures", -0.06),
    ("Free cash flow", 0.11),
    ("Dividends paid", -0.03),
    ("Repurchases of common stock", -0.04),
]
METRICS = [
    "total revenue",
    "net income",
    "operating income",
    "gross margin",
    "capital expenditures",
    "free cash flow",
    "total assets",
    "long-term debt",
    "cash and cash equivalents",
    "diluted earnings per share",
    "research and development expense",
    "dividends paid",
    "inventories",
    "accounts receivable",
    "operating cash flow",
    "effective tax rate",
]
PROSE = [
    "{c} operates through {n} reportable segments and sells to customers in more than {k} countries.",
    "Revenue for the period was ${rev:,} million, {dir} {pct}% compared with the prior-year period, driven by "
    "pricing actions and higher volumes in our core markets.",
    "Gross margin was {gm}% of revenue, reflecting input cost inflation partly offset by productivity programs.",
    "Operating expenses increased to ${opex:,} million as we continued to invest in engineering and sales capacity.",
    "We ended the period with ${cash:,} million of cash and cash equivalents and ${debt:,} million of long-term debt.",
    "Net cash provided by operating activities was ${ocf:,} million, and capital expenditures were ${capex:,} million.",
    "Our effective tax rate was {etr}%, compared with {etr2}% a year earlier, due to the mix of earnings by "
    "jurisdiction.",
    "Diluted earnings per share were ${eps}, on {shares:,} million weighted-average diluted shares outstanding.",
    "The Board of Directors declared a quarterly dividend of ${div} per share and authorized the repurchase of up "
    "to ${buyback:,} million of common stock.",
    "Backlog at the end of the period was ${backlog:,} million, of which about {bp}% is expected to be recognized "
    "within twelve months.",
    "Changes in foreign currency exchange rates reduced revenue by approximately ${fx} million.",
    "We are exposed to interest rate risk on our variable-rate borrowings; a 100 basis point increase would raise "
    "annual interest expense by about ${irisk} million.",
    "Competition in our markets is intense, and pricing pressure from larger competitors could reduce our margins.",
    "Supply chain disruptions, including shortages of components and higher freight costs, affected deliveries "
    "during the period.",
    "We had approximately {emp:,} employees at the end of the fiscal year, of whom {union}% were covered by "
    "collective bargaining agreements.",
    "Goodwill of ${gw:,} million was tested for impairment and no impairment was recorded.",
]
SECTIONS = {
    "10-K": [
        "Item 1. Business",
        "Item 1A. Risk Factors",
        "Item 2. Properties",
        "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations",
        "Item 7A. Quantitative and Qualitative Disclosures About Market Risk",
        "Item 8. Financial Statements and Supplementary Data",
    ],
    "10-Q": [
        "Item 1. Financial Statements",
        "Item 2. Management's Discussion and Analysis of Financial Condition and Results of Operations",
        "Item 3. Quantitative and Qualitative Disclosures About Market Risk",
        "Item 1A. Risk Factors",
    ],
    "8-K": ["Item 2.02 Results of Operations and Financial Condition", "Item 9.01 Financial Statements and Exhibits"],
    "Earnings": ["# Highlights", "# Financial results", "# Outlook"],
    "DEF14A": ["# Proposal 1: Election of Directors", "# Executive Compensation", "# Proposal 2: Say on Pay"],
}


# -- the synthetic corpus and question set ----------------------------------------------------


def slug(company: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", company.lower()).strip("-")


def filing_slots(n: int) -> list[tuple[str, str, int, int | None, str]]:
    """n filings (company, form, fiscal year, quarter or number, suffix), spread over as many
    companies as it takes, each company's 10-Ks first."""
    count = max(2, -(-n // PER_COMPANY))
    assert count <= len(COMPANIES), f"at most {len(COMPANIES) * PER_COMPANY} filings"
    companies = COMPANIES[:count]
    order = [(form, year, part, suffix) for form, part, suffix in SLOTS for year in reversed(YEARS)]
    return [(companies[i % count], *order[i // count]) for i in range(n)]


def figures(company: str, year: int) -> dict[str, int]:
    """A company-year's figures, in millions, the same in each of its filings."""
    rng = random.Random(f"{company} {year}")
    base = 800 + (sum(map(ord, company)) * 37) % 9000
    revenue = int(base * (1.06 + rng.random() * 0.02) ** (year - 2019))
    return {key: int(revenue * share * (0.9 + 0.2 * rng.random())) for _, key, share in LINE_ITEMS} | {
        "revenue": revenue
    }


def filing_text(company: str, form: str, year: int, part: int | None, rng: random.Random) -> str:
    quarter = part if form in ("10-Q", "Earnings") else None
    ended = f"December 31, {year}" if quarter in (None, 4) else ["March 31", "June 30", "September 30"][quarter - 1]
    ended = ended if "," in ended else f"{ended}, {year}"
    title = {"10-K": "FORM 10-K", "10-Q": "FORM 10-Q", "8-K": "FORM 8-K"}.get(form, form)
    kind = "fiscal year" if form == "10-K" else "quarterly period"
    lines = [
        "UNITED STATES SECURITIES AND EXCHANGE COMMISSION",
        "Washington, D.C. 20549",
        title,
        f"For the {kind} ended {ended}" if form in ("10-K", "10-Q") else f"Date of report: {ended}",
        company,
        "(Exact name of registrant as specified in its charter)",
        "",
    ]
    fig = figures(company, year)
    pages = rng.randint(5, 10)
    heads = SECTIONS[form]
    for page in range(pages):
        if page:
            lines.append("\f")  # a printer's page break, as EDGAR text filings have
        if page < len(heads):
            lines += [heads[page], ""]
        for _ in range(4):
            lines.append(" ".join(_sentence(rng, company, fig) for _ in range(rng.randint(3, 6))))
            lines.append("")
        if page % 2 == 1 or page == pages - 1:
            lines += _statement(rng, fig, year, page)
    return "\n".join(lines) + "\n"


def _sentence(rng: random.Random, company: str, fig: dict[str, int]) -> str:
    rev = fig["revenue"]
    return rng.choice(PROSE).format(
        c=company,
        n=rng.randint(2, 5),
        k=rng.randint(20, 120),
        rev=rev,
        dir=rng.choice(["up", "down"]),
        pct=rng.randint(1, 18),
        gm=round(100 * fig["gross"] / rev, 1),
        opex=fig["rnd"] + fig["sga"],
        cash=int(rev * 0.21),
        debt=int(rev * 0.44),
        ocf=int(rev * 0.17),
        capex=int(rev * 0.06),
        etr=round(100 * fig["tax"] / max(fig["pretax"], 1), 1),
        etr2=round(15 + 10 * rng.random(), 1),
        eps=round(fig["net"] / (50 + rev // 40), 2),
        shares=50 + rev // 40,
        div=round(0.1 + rng.random(), 2),
        buyback=rng.randint(50, 2000),
        backlog=int(rev * (0.3 + rng.random())),
        bp=rng.randint(40, 90),
        fx=rng.randint(3, 90),
        irisk=rng.randint(1, 40),
        emp=rng.randint(1000, 90000),
        union=rng.randint(2, 40),
        gw=int(rev * 0.3),
    )


def _statement(rng: random.Random, fig: dict[str, int], year: int, page: int) -> list[str]:
    rev = fig["revenue"]
    kind = page // 2 % 3
    if kind == 0:
        title, rows = "CONSOLIDATED STATEMENTS OF OPERATIONS", [(name, fig[key]) for name, key, _ in LINE_ITEMS]
    elif kind == 1:
        title, rows = "CONSOLIDATED BALANCE SHEETS", [(name, int(rev * share)) for name, share in BALANCE]
    else:
        title, rows = "CONSOLIDATED STATEMENTS OF CASH FLOWS", [(name, int(rev * share)) for name, share in CASH]
    out = [title, f"(in millions) {year} {year - 1}"]
    out += [f"{name} {value:,} {int(value * (0.88 + 0.1 * rng.random())):,}" for name, value in rows]
    return [*out, ""]


def write_corpus(folder: Path, n: int, seed: int = 7) -> list[str]:
    """n filings and their metadata.jsonl in ``folder``; the companies, in order."""
    folder.mkdir(parents=True)
    rng = random.Random(seed)
    records, companies = [], []
    for company, form, year, part, suffix in filing_slots(n):
        period = f"{year}q{part}-" if form in ("10-Q", "Earnings") else f"{year}-"
        number = f"-{part}" if form == "8-K" else ""
        name = f"{slug(company)}-{period}{suffix}{number}.txt"
        (folder / name).write_text(filing_text(company, form, year, part, rng))
        record = {"file": name, "company": company, "form_type": form, "fiscal_year": year}
        if form in ("10-Q", "Earnings"):
            record["fiscal_quarter"] = part
        records.append(json.dumps(record))
        if company not in companies:
            companies.append(company)
    (folder / "metadata.jsonl").write_text("\n".join(records) + "\n")
    return companies


def write_questions(path: Path, companies: list[str], q: int, seed: int = 11) -> int:
    """q distinct questions about the companies, each scoped to its company."""
    rng = random.Random(seed)
    periods = [f"in FY{y}" for y in YEARS] + [f"in Q{k} of FY{y}" for y in YEARS for k in (1, 2, 3)]
    periods += [f"as of December 31, {y}" for y in YEARS] + ["in the most recent fiscal year"]
    combos = [(c, m, p) for c in companies for m in METRICS for p in periods]
    assert q <= len(combos), f"at most {len(combos)} distinct questions over {len(companies)} companies"
    with path.open("w") as out:
        for i, (company, metric, period) in enumerate(rng.sample(combos, q)):
            row = {"id": f"g{i:05d}", "question": f"What was {company}'s {metric} {period}?"}
            out.write(json.dumps(row | {"scope": {"company": company}}) + "\n")
    return q


# -- running prism and reading what it cost ---------------------------------------------------


def embedded_env() -> dict[str, str]:
    """This environment without a broker, an LLM or any other PRISM_ setting: the defaults."""
    from workers.testing import fleet_env

    return fleet_env(None, None, None)


def prism(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 1800) -> dict:
    """`prism ARGS` as a subprocess; its wall and CPU seconds (its own resource usage, children
    included) and its output. Exits when the command fails."""
    out, err = cwd / "prism.out", cwd / "prism.err"
    started = time.monotonic()
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([PRISM, *args], cwd=cwd, env=env, stdout=o, stderr=e, start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    done = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "out": out.read_text(), "err": err.read_text()}
    if proc.returncode not in ENDED:  # 3: a run that ended with some failures (FinanceBench's no-filing questions)
        raise SystemExit(f"prism {' '.join(args[:2])} failed ({proc.returncode}):\n{done['err'][-3000:]}")
    return done


def ingest_summary(err: str) -> dict[str, float]:
    """The counts and seconds of `prism ingest`'s summary line."""
    found = {}
    for key, pattern in {
        "ingested": r"(\d+) filings ingested",
        "new_versions": r"(\d+) new versions",
        "unchanged": r"(\d+) unchanged",
        "failed": r"(\d+) failed",
        "seconds": r" in ([\d.]+) s: ",
    }.items():
        match = re.search(pattern, err)
        assert match, f"no {key} in the output of prism ingest:\n{err[-2000:]}"
        found[key] = float(match.group(1))
    return found


def run_folder(results: Path, run_id: str) -> Path:
    return results / "runs" / run_id


def manifest(results: Path, run_id: str) -> dict:
    return json.loads((run_folder(results, run_id) / "manifest.json").read_text())


def first_result_s(results: Path, run_id: str) -> float:
    """Seconds from the run's creation to its first finished question result."""
    created = datetime.fromisoformat(manifest(results, run_id)["created_at"])
    done = [
        datetime.fromisoformat(json.loads(p.read_text())["finished_at"])
        for p in (run_folder(results, run_id) / "results" / "chunks").glob("*.json")
    ]
    assert done, f"no chunk results in run {run_id}"
    return (min(done) - created).total_seconds()


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and every process under it (and their reaped children), from /proc."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += sum(int(v) for v in stats[pid][11:15])  # utime stime cutime cstime
            todo += children.get(pid, [])
    return total / CLK_TCK


# -- the measurements -------------------------------------------------------------------------


def ingest_grid(work: Path, sizes: list[int], env: dict[str, str]) -> dict:
    """Each corpus size ingested once, embedded; the largest one again with one file changed."""
    grid = {}
    for n in sizes:
        folder, corpus = work / f"filings-{n}", work / f"corpus-{n}"
        companies = write_corpus(folder, n)
        done = prism(["ingest", str(folder), "--corpus", str(corpus)], env, work)
        summary = ingest_summary(done["err"])
        assert summary["ingested"] == n and summary["failed"] == 0, summary
        grid[n] = done | {"n": n, "companies": companies, "folder": folder, "corpus": corpus}
        print(
            f"ingest {n} filings ({len(companies)} companies): {done['wall']:.1f} s wall, {done['cpu']:.1f} s CPU "
            f"(wall/CPU {done['wall'] / done['cpu']:.2f}), {1000 * done['wall'] / n:.0f} ms a filing; "
            f"the command says {summary['seconds']:.1f} s",
            flush=True,
        )
    grid["reingest"] = {}
    for n in sizes:  # one file changed at each size: the cost follows the change, not the corpus
        changed = sorted(grid[n]["folder"].glob("*.txt"))[0]
        changed.write_text(changed.read_text() + "\nSubsequent events: none that require disclosure.\n")
        again = prism(["ingest", str(grid[n]["folder"]), "--corpus", str(grid[n]["corpus"])], env, work)
        summary = ingest_summary(again["err"])
        assert summary["new_versions"] == 1 and summary["unchanged"] == n - 1, summary
        grid["reingest"][n] = again
        print(
            f"re-ingest {n} filings, 1 changed: {again['wall']:.2f} s wall ({again['wall'] / grid[n]['wall']:.2f} of "
            f"the first), {again['cpu']:.2f} s CPU; the command says {summary['seconds']:.2f} s",
            flush=True,
        )
    return grid


def question_run(work: Path, q: int, corpus: dict, env: dict[str, str], run_id: str) -> dict:
    """A question set of q questions about the corpus's companies, run over it embedded."""
    results, path = work / f"results-{corpus['n']}", work / f"questions-{q}-{corpus['n']}.jsonl"
    write_questions(path, corpus["companies"], q)
    args = ["run", "--questions", str(path), "--corpus", str(corpus["corpus"]), "--results", str(results)]
    done = prism([*args, "--run-id", run_id], env, work)
    m = manifest(results, run_id)
    # every question planned, each of its filings ranked (--filings auto: one or a few a question)
    counts = m["counts"]
    assert m["status"] in ("complete", "complete_with_failures") and counts["questions"] == q <= counts["done"], (
        m["status"],
        m.get("error"),
        m["counts"],
    )
    plan_s = m["timings"]["plan_s"]
    print(
        f"run {q} questions over {corpus['n']} filings: {done['wall']:.1f} s wall, {done['cpu']:.1f} s CPU "
        f"(wall/CPU {done['wall'] / done['cpu']:.2f}), plan {plan_s:.2f} s ({1000 * plan_s / q:.1f} ms a question), "
        f"{1000 * done['wall'] / q:.0f} ms a question in all",
        flush=True,
    )
    return done | {"plan_s": plan_s, "args": args, "run_id": run_id, "questions": path, "results": results}


def question_grid(work: Path, sizes: list[int], corpora: dict, env: dict[str, str]) -> dict:
    """Each question set size over the largest corpus, and the smallest over the smallest corpus,
    embedded; then a night with nothing new and `prism status` after the largest."""
    grid, largest = {}, corpora[max(corpora)]
    for q in sizes:
        grid[q] = question_run(work, q, largest, env, f"growth-q{q}")
    small = corpora[min(corpora)]
    grid["small_corpus"] = grid[sizes[0]] if small is largest else question_run(work, sizes[0], small, env, "small")
    last = grid[sizes[-1]]
    results = last["results"]
    night = prism([*last["args"], "--new", "--run-id", "growth-night"], env, work)
    files = sum(1 for p in run_folder(results, "growth-night").rglob("*") if p.is_file())
    grid["night"] = night | {"files": files, "counts": manifest(results, "growth-night")["counts"]}
    print(
        f"--new over the unchanged corpus: {night['wall']:.1f} s wall, {files} files written, "
        f"counts {grid['night']['counts']}",
        flush=True,
    )
    status = prism(["status", last["run_id"], "--results", str(results)], env, work)
    grid["status_s"] = status["wall"]
    print(f"prism status {last['run_id']}: {status['wall']:.2f} s wall, {status['cpu']:.2f} s CPU", flush=True)
    return grid


def financebench(work: Path, env: dict[str, str], quick: bool) -> dict:
    """The 150 FinanceBench questions over their 74 filings, embedded, as bench/corpus.py builds
    them (quick: its first questions over their filings)."""
    from corpus import DOC_INFO, QUICK_QUESTIONS, page_rows, question_rows, question_set

    from producer.ingest import ingest_source
    from workers.store import LocalStore

    fb = work / "financebench"
    fb.mkdir()
    rows = question_rows(QUICK_QUESTIONS if quick else None)
    ingest_source(page_rows(fb, rows, quick), LocalStore(fb / "corpus"), meta=DOC_INFO)
    count = question_set(fb / "questions.jsonl", rows)
    results = fb / "results"
    args = ["run", "--questions", str(fb / "questions.jsonl"), "--corpus", str(fb / "corpus")]
    done = prism([*args, "--results", str(results), "--run-id", "financebench"], env, fb)
    m = manifest(results, "financebench")
    first = first_result_s(results, "financebench")
    print(
        f"FinanceBench {count} questions embedded: {done['wall']:.1f} s wall, {done['cpu']:.1f} s CPU, first result "
        f"after {first:.1f} s, plan {m['timings']['plan_s']:.1f} s, status {m['status']}",
        flush=True,
    )
    return {"wall": done["wall"], "first": first}


def fleet_run(work: Path, corpus: dict, questions: Path, q: int) -> dict:
    """The question set on two worker processes: the producer's CPU against the workers'."""
    from prism.testing.simulator import Simulator

    with (
        Simulator() as sim,
        Fleet(sim, work / "fleet", FLEET_REDIS_DB, PRISM_CHUNK_RANKER="financial", PRISM_DOC_RANKER="prior") as fleet,
    ):
        fleet.start_workers(2, concurrency=1)
        target = f"s3://{fleet.bucket}/corpus"
        loaded = prism(["ingest", str(corpus["folder"]), "--corpus", target], fleet.env, fleet.workdir)
        summary = ingest_summary(loaded["err"])
        assert summary["ingested"] == corpus["n"] and summary["failed"] == 0, summary
        print(f"fleet ingest of {corpus['n']} filings on 2 workers: {loaded['wall']:.1f} s wall", flush=True)
        changed = sorted(corpus["folder"].glob("*.txt"))[1]
        changed.write_text(changed.read_text() + "\nSubsequent events: a dividend was declared.\n")
        again = prism(["ingest", str(corpus["folder"]), "--corpus", target], fleet.env, fleet.workdir)
        summary = ingest_summary(again["err"])
        assert summary["new_versions"] == 1 and summary["unchanged"] == corpus["n"] - 1, summary
        print(
            f"fleet re-ingest, 1 changed: {again['wall']:.2f} s wall ({again['wall'] / loaded['wall']:.3f} of the "
            f"first), producer CPU {again['cpu']:.2f} s",
            flush=True,
        )
        pids = [w.proc.pid for w in fleet.workers]
        before = [tree_cpu(pid) for pid in pids]
        args = ["run", "--questions", str(questions), "--corpus", target, "--results", f"s3://{fleet.bucket}/prism"]
        done = prism([*args, "--run-id", "growth-fleet"], fleet.env, fleet.workdir)
        workers = [tree_cpu(pid) - b for pid, b in zip(pids, before)]
        body = fleet.s3.client().get_object(Bucket=fleet.bucket, Key="prism/runs/growth-fleet/manifest.json")["Body"]
        m = json.loads(body.read())
    counts = m["counts"]
    assert m["status"] == "complete" and counts["questions"] == q <= counts["done"] == counts["chunks"], (
        m["status"],
        m.get("error"),
        counts,
    )
    share = done["cpu"] / (done["cpu"] + sum(workers))
    print(
        f"fleet run of {q} questions on 2 workers: {done['wall']:.1f} s wall; CPU producer {done['cpu']:.1f} s, "
        f"workers {' + '.join(f'{w:.1f}' for w in workers)} s: producer share {share:.2f}",
        flush=True,
    )
    return {"share": share, "wall": done["wall"], "reingest_share": again["wall"] / loaded["wall"]}


def sizes(text: str) -> list[int]:
    return sorted({int(v) for v in text.split(",") if v.strip()})


def main() -> None:
    flags = parser(__doc__)
    flags.add_argument("--filings", type=sizes, default=[100, 1000], help="corpus sizes (default 100,1000)")
    flags.add_argument("--questions", type=sizes, default=[100, 1000], help="question set sizes (default 100,1000)")
    args = flags.parse_args()
    filings, questions = ([30], [30]) if args.quick else (args.filings, args.questions)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on a kill, as on Ctrl-C
    env = embedded_env()
    with tempfile.TemporaryDirectory(prefix="prism-growth-") as tmp:
        work = Path(tmp)
        ingested = ingest_grid(work, filings, env)
        largest = ingested[filings[-1]]
        asked = question_grid(work, questions, {n: ingested[n] for n in filings}, env)
        fb = financebench(work, env, args.quick)
        fleet = fleet_run(work, largest, asked[questions[-1]]["questions"], questions[-1])
    n, q, small_n, small_q = filings[-1], questions[-1], filings[0], questions[0]
    first = ingested[n]
    report(
        filings=n,
        questions=q,
        ingest_cpu_ratio=first["wall"] / first["cpu"],
        run_cpu_ratio=asked[q]["wall"] / asked[q]["cpu"],
        plan_s_per_q=asked[q]["plan_s"] / q,
        producer_cpu_share=fleet["share"],
        reingest_1_changed_s=ingested["reingest"][n]["wall"],
        reingest_share=ingested["reingest"][n]["wall"] / first["wall"],
        reingest_growth=ingested["reingest"][n]["wall"] / ingested["reingest"][small_n]["wall"],
        fleet_reingest_share=fleet["reingest_share"],
        new_night_files=asked["night"]["files"],
        status_s=asked["status_s"],
        question_set_150_embedded_s=fb["wall"],
        first_result_s=fb["first"],
        ingest_ms_per_filing_small=1000 * ingested[small_n]["wall"] / small_n,
        ingest_ms_per_filing=1000 * first["wall"] / n,
        run_ms_per_q_small=1000 * asked[small_q]["wall"] / small_q,
        run_ms_per_q=1000 * asked[q]["wall"] / q,
        run_ms_per_q_small_corpus=1000 * asked["small_corpus"]["wall"] / small_q,
        fleet_run_s=fleet["wall"],
    )


if __name__ == "__main__":
    main()
