"""The corpus catalogue at EDGAR's scale: a night's commands over a corpus of 10^4, 10^5 and 10^6
filings cost what the night asks of them, not what the corpus holds.

The corpus is the 11 shared real EDGAR filings (shared/data/edgar), ingested for real, beside
synthetic catalogue entries put in through the append path an ingest uses (Catalog.append), in
batches of 50,000, shaped like a backfill: companies one per 25 filings, forms in EDGAR's mix,
filed over ten years. One synthetic company's entry is a real stored filing under a new identity;
`prism corpus ls --company` must find it and a question scoped to it must cite it
(`synthetic_found`). After each load, `prism corpus compact`. The question set is the shared 37
questions (each scoped to a real company) and the synthetic company's one, so the night's work is
the same at every size.

Every time is CPU seconds (user + system of the command and its children, from wait4), the
median of 3 (1 with `--quick`), embedded (no broker, no LLM, the $0 rankers):

    run_s_ratio_1m             `prism run` of the question set, at 10^6 over 10^4
    ingest1_s_ratio_1m         `prism ingest` of one new filing, at 10^6 over 10^4
    new_night_s_ratio_1m       that ingest plus the `prism run --new` after it, at 10^6 over 10^4
    peak_rss_ratio_1m          the largest peak RSS of any one of those commands, at 10^6 over 10^4
    peak_rss_mb_1m             that peak at 10^6
    ls_cik_s_1m                wall seconds of `prism corpus ls --cik` of one company at 10^6
    synthetic_found            1 when the synthetic company was listed and cited at every size
    catalog_write_s_per_100k   wall seconds of Catalog.append per 100,000 entries
    catalog_mb_per_100k        the catalogue's stored megabytes per 100,000 entries, compacted
    fleet_run_s_ratio          the question set on a fleet (SeaweedFS, Redis, 2 workers), the
                               producer's and the workers' CPU seconds, at 10^5 over 10^4
    concurrent_lost            filings missing after two `prism ingest` of 1,000 feed-archive
                               members each (prism.testing.feed) into one S3 corpus at once, on
                               2 workers (0 expected)
    filings_per_s_2w_empty, filings_per_s_2w_full, backfill_full_over_empty
                               a 5,000-member feed archive ingested on 2 workers into an empty
                               corpus and into one of 100,000 entries, and the second's rate over
                               the first's

`--quick`: 10^4 and 10^5 (the `_1m` keys are computed at 10^5), 8 of the questions, one
measurement each, 20 members a concurrent ingest and 40 for the backfill (under 80 s).

    python bench/corpus_scale.py [--quick]
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from _common import SHARED, parser, redis_db, report, s3_server
from backfill import Environ, Workers, build_day, cpu_s, tree
from edgar import question_set as write_questions
from edgar import read_jsonl

from prism.ingest.models import FilingEntry, FilingMeta, VersionEntry
from prism.testing.feed import bases_in, copies, write_archive
from workers.catalog import TABLES, Catalog
from workers.corpus import Corpus
from workers.settings import load_settings
from workers.store import LocalStore, open_store
from workers.testing import fleet_env

KEYS = (
    "run_s_ratio_1m",
    "new_night_s_ratio_1m",
    "ingest1_s_ratio_1m",
    "peak_rss_ratio_1m",
    "peak_rss_mb_1m",
    "ls_cik_s_1m",
    "synthetic_found",
    "catalog_write_s_per_100k",
    "catalog_mb_per_100k",
    "fleet_run_s_ratio",
    "concurrent_lost",
    "filings_per_s_2w_empty",
    "filings_per_s_2w_full",
    "backfill_full_over_empty",
)
EDGAR = SHARED / "edgar"
PRISM = str(Path(sys.executable).parent / "prism")
BATCH = 50_000  # entries a backfill's checkpoint appends at once
FILINGS_PER_COMPANY = 25
SYNTHETIC_CIK = 2_900_000  # above every real CIK in the shared data; the synthetic ones follow it
REDIS_DB = 13  # a DB no other benchmark uses: it is flushed
FORMS = {  # EDGAR's mix of a year's filings, roughly: ownership reports and prospectuses lead
    "4": 30,
    "424B2": 10,
    "8-K": 8,
    "SC 13G/A": 6,
    "FWP": 6,
    "D": 4,
    "6-K": 3,
    "10-Q": 3,
    "497K": 3,
    "13F-HR": 2,
    "3": 2,
    "S-8": 1,
    "10-K": 1,
    "DEF 14A": 1,
    "S-1": 1,
    "SC 13D": 1,
}
SYNTHETIC = "Quillfeather Minerals Corp"


@dataclass(frozen=True)
class Used:
    """What one command cost: CPU seconds (its children's with it), wall seconds, peak RSS."""

    cpu_s: float
    wall_s: float
    rss_mb: float
    stdout: str


# Runs a command and writes its rusage. A process's peak RSS counts the memory of the process it
# was forked from until its exec, so the commands are started from this small one, not from the
# benchmark (which holds a million catalogue entries while it loads them).
_RUSAGE = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, used = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"cpu_s": used.ru_utime + used.ru_stime, "rss_kb": used.ru_maxrss}, out)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(args: list[str], env: dict[str, str], cwd: Path, ok: tuple[int, ...] = (0,)) -> Used:
    """A `prism` command and what it used (through _RUSAGE)."""
    out, err, usage = cwd / "cmd.out", cwd / "cmd.err", cwd / "cmd.rusage"
    began = time.perf_counter()
    with out.open("w") as o, err.open("w") as e:
        code = subprocess.call(
            [sys.executable, "-c", _RUSAGE, str(usage), PRISM, *args], cwd=cwd, env=env, stdout=o, stderr=e
        )
    wall = time.perf_counter() - began
    if code not in ok:
        raise SystemExit(f"prism {' '.join(args)} failed (exit {code}):\n{err.read_text()[-3000:]}")
    used = json.loads(usage.read_text())
    return Used(used["cpu_s"], wall, used["rss_kb"] / 1024, out.read_text())


def median(used: list[Used], of: str) -> float:
    return statistics.median(getattr(u, of) for u in used)


# -- the corpus ----------------------------------------------------------------------------------


class Synthetic:
    """Catalogue entries shaped like a backfill's, written by Catalog.append in batches."""

    def __init__(self, seed: int = 7):
        self.rng = random.Random(seed)
        self.made = 0
        self.forms, self.weights = list(FORMS), list(FORMS.values())
        self.now = datetime.now(UTC)

    def heads(self, n: int, companies: int) -> dict[str, FilingEntry]:
        rng, out = self.rng, {}
        forms = rng.choices(self.forms, self.weights, k=n)
        for form in forms:
            i, k = self.made, rng.randrange(companies)
            self.made += 1
            cik, filed = SYNTHETIC_CIK + 1 + k, date(2015, 1, 1) + timedelta(days=rng.randrange(3650))
            accession = f"{cik:010d}-{filed.year % 100:02d}-{i % 1_000_000:06d}"
            fid, version = f"syn-{accession}", f"{i:020x}"
            meta = FilingMeta(
                company=f"Synthetic Filer {k:06d} Inc",
                cik=f"{cik:010d}",
                form_type=form,
                filed=filed,
                period_end=filed - timedelta(days=40),
                accession=accession,
                source_uri=f"s3://edgar-feed/{filed:%Y%m%d}.nc.tar.gz#{accession}.nc",
                name=fid,
            )
            entry = VersionEntry(
                version=version,
                content_sha256=f"{i:064x}",
                key=Corpus.filing_key(fid, version),
                ingested_at=self.now,
                chunks=40,
                tokens=20_000,
                pages=12,
            )
            out[fid] = FilingEntry(id=fid, meta=meta, latest=version, versions=[entry], updated_at=self.now)
        return out


def synthetic_company(corpus: Corpus) -> FilingEntry:
    """A real stored filing (the smallest 8-K) under the synthetic company's identity, stored
    as an ingest stores one; its head goes into the catalogue with the synthetic entries."""
    heads = corpus.catalog.all_filings()
    chosen = min((h for h in heads.values() if h.meta.form_type == "8-K"), key=lambda h: h.versions[-1].tokens)
    filing = corpus.get_filing(chosen.id)
    meta = filing.meta.model_copy(update={"company": SYNTHETIC, "cik": f"{SYNTHETIC_CIK:010d}", "ticker": "QFMC"})
    fid = "quillfeather-8k-2024-06-03"
    corpus.put_filing(filing.model_copy(update={"id": fid, "meta": meta}))
    head = corpus.head(fid)
    assert head is not None
    return head


def load(catalog: Catalog, synthetic: Synthetic, n: int, companies: int, extra: FilingEntry | None) -> float:
    """``n`` more entries in batches (``extra`` in the first); the seconds spent appending."""
    spent = 0.0
    while n > 0:
        heads = synthetic.heads(min(BATCH, n), companies)
        if extra is not None:
            heads[extra.id], extra = extra, None
        began = time.perf_counter()
        catalog.append(heads)
        spent += time.perf_counter() - began
        n -= BATCH
    return spent


def catalog_mb(catalog: Catalog) -> float:
    """The catalogue's stored megabytes at its newest version: its files and logs (a compacted
    table keeps the files it replaced for a week, for runs that name an older version)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    total = 0
    for name in TABLES:
        uri, options = catalog.location(name)
        actions = pa.table(DeltaTable(uri, storage_options=options).get_add_actions(flatten=True))
        total += sum(actions.column("size_bytes").to_pylist())
        total += sum(p.stat().st_size for p in (Path(uri) / "_delta_log").glob("*") if p.is_file())
    return total / 1e6


def question_set(path: Path, quick: bool) -> Path:
    """The shared questions (every fifth with ``quick``) and the synthetic company's one."""
    lines = read_jsonl(EDGAR / "questions.jsonl")
    synthetic = {"id": "synthetic-q1", "question": "What did the company report?", "scope": {"company": SYNTHETIC}}
    write_questions(path, [*(lines[::5] if quick else lines), synthetic])
    return path


def cited(results: Path, run_id: str, question: str) -> set[str]:
    import csv

    with (results / "runs" / run_id / "evidence.csv").open() as f:
        return {r["filing_id"] for r in csv.DictReader(f) if r["question_id"] == question}


# -- the embedded lane ---------------------------------------------------------------------------


@dataclass
class Stage:
    """The figures of one corpus size."""

    size: int
    run: list[Used]
    ingest1: list[Used]
    run_new: list[Used]
    ls_cik: list[Used]
    found: bool

    @property
    def rss_mb(self) -> float:
        return max(u.rss_mb for u in self.run + self.ingest1 + self.run_new + self.ls_cik)

    @property
    def new_night_s(self) -> float:
        return statistics.median(a.cpu_s + b.cpu_s for a, b in zip(self.ingest1, self.run_new, strict=True))


class Night:
    """A night's commands over one corpus folder, embedded."""

    def __init__(self, work: Path, corpus: Path, questions: Path, repeats: int):
        self.work, self.corpus, self.questions, self.repeats = work, corpus, questions, repeats
        self.results = work / "results"
        self.env = fleet_env(None, None, None, PRISM_RESULTS=str(self.results))
        self.bases = bases_in(EDGAR / "filings")
        self.night = 0

    def run(self, *more: str) -> tuple[Used, str]:
        run_id = f"scale-{self.night:03d}-{len(list(self.results.glob('runs/*')))}"
        args = ["run", "--questions", str(self.questions), "--corpus", str(self.corpus), "--run-id", run_id, *more]
        return measured(args, self.env, self.work, ok=(0, 3)), run_id

    def new_file(self) -> Path:
        """A new filing of a company no question asks about, as a night's feed brings one."""
        self.night += 1
        base = min(self.bases, key=lambda b: len(b.documents))
        base = replace(base, company=f"Nightly Filer {self.night} Corp", cik=f"{2_800_000 + self.night:010d}")
        copy = next(copies([base], 1, date(2026, 1, 1) + timedelta(days=self.night), start=500_000 + self.night))
        path = self.work / "nightly" / copy.name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(copy.data)
        return path

    def stage(self, size: int) -> Stage:
        runs, ingests, news, listed = [], [], [], []
        found = True
        for _ in range(self.repeats):
            used, run_id = self.run()
            runs.append(used)
            found &= "quillfeather-8k-2024-06-03" in cited(self.results, run_id, "synthetic-q1")
            ingests.append(
                measured(["ingest", str(self.new_file()), "--corpus", str(self.corpus)], self.env, self.work)
            )
            news.append(self.run("--new")[0])
            listed.append(
                measured(
                    ["corpus", "ls", "--corpus", str(self.corpus), "--cik", str(SYNTHETIC_CIK)], self.env, self.work
                )
            )
            found &= "quillfeather-8k-2024-06-03" in listed[-1].stdout
        by_name = measured(
            ["corpus", "ls", "--corpus", str(self.corpus), "--company", "Quillfeather"], self.env, self.work
        )
        found &= "quillfeather-8k-2024-06-03" in by_name.stdout
        stage = Stage(size, runs, ingests, news, listed, found)
        print(
            f"{size:>9,} entries: run {median(runs, 'cpu_s'):.2f} s, ingest of one file {median(ingests, 'cpu_s'):.2f} s,"
            f" run --new {median(news, 'cpu_s'):.2f} s (CPU); ls --cik {median(listed, 'wall_s'):.2f} s wall;"
            f" peak RSS {stage.rss_mb:.0f} MB (run {max(u.rss_mb for u in runs):.0f}, ingest {max(u.rss_mb for u in ingests):.0f},"
            f" run --new {max(u.rss_mb for u in news):.0f}, ls {max(u.rss_mb for u in listed):.0f});"
            f" synthetic company found: {found}",
            flush=True,
        )
        return stage


def compact(corpus: str, env: dict[str, str], cwd: Path) -> None:
    used = measured(["corpus", "compact", "--corpus", corpus], env, cwd)
    print(f"  compacted in {used.wall_s:.1f} s", flush=True)


def embedded_lane(work: Path, sizes: tuple[int, ...], quick: bool) -> tuple[list[Stage], dict[str, float], Path]:
    """The corpus grown to each size in turn and a night's commands over it; a copy of the
    corpus at 10^5 for the backfill lane."""
    corpus = work / "corpus"
    night = Night(work, corpus, question_set(work / "questions.jsonl", quick), 1 if quick else 3)
    measured(["ingest", str(EDGAR / "filings"), "--corpus", str(corpus)], night.env, work)
    store = LocalStore(corpus)
    extra: FilingEntry | None = synthetic_company(Corpus(store))
    before_mb = catalog_mb(Catalog(store))
    night.run()  # the first run ranks; the measured ones plan and reuse, as a night does
    synthetic, held, write_s, stages, at_100k = Synthetic(), 0, 0.0, [], work / "corpus-100k"
    for size in sizes:
        write_s += load(Catalog(store), synthetic, size - held, max(1, size // FILINGS_PER_COMPANY), extra)
        extra, held = None, size
        print(f"{size:,} entries loaded ({write_s:.1f} s appending so far)", flush=True)
        compact(str(corpus), night.env, work)
        stages.append(night.stage(size))
        if size == 100_000:
            shutil.copytree(corpus, at_100k)
    added_mb = catalog_mb(Catalog(store)) - before_mb
    per_100k = {"write_s": write_s * 100_000 / held, "mb": added_mb * 100_000 / held}
    return stages, per_100k, at_100k


# -- the fleet lanes -----------------------------------------------------------------------------


class FleetParts:
    """SeaweedFS, a Redis DB and 2 workers, their CPU read from /proc."""

    def __init__(self, work: Path):
        self.s3 = s3_server(work / "s3")
        self.bucket = self.s3.bucket()
        self.env = fleet_env(redis_db(REDIS_DB), self.s3.endpoint, None)
        self.workers = Workers(self.env, work, 2)

    def cpu_s(self) -> float:
        return sum(cpu_s(p) for w in self.workers.started for p in tree(w.proc.pid))

    def close(self) -> None:
        self.workers.stop()
        self.s3.stop()


def fleet_run_lane(fleet: FleetParts, work: Path, sizes: tuple[int, ...], quick: bool) -> float:
    """The question set on the fleet over an S3 corpus at the two smaller sizes: producer and
    worker CPU seconds, the larger over the smaller."""
    corpus, results = f"s3://{fleet.bucket}/scale-corpus", f"s3://{fleet.bucket}/scale-results"
    env = fleet.env | {"PRISM_RESULTS": results}
    questions = question_set(work / "fleet-questions.jsonl", quick)
    measured(["ingest", str(EDGAR / "filings"), "--corpus", corpus], env, work)
    with Environ(env):
        store = open_store(corpus, load_settings())
    synthetic, held, spent = Synthetic(seed=11), 0, {}
    runs = 0

    def run() -> float:
        nonlocal runs
        runs += 1
        before = fleet.cpu_s()
        args = ["run", "--questions", str(questions), "--corpus", corpus, "--run-id", f"fleet-{runs}"]
        used = measured(args, env, work, ok=(0, 3))
        return used.cpu_s + fleet.cpu_s() - before

    run()  # the first run ranks
    for size in sizes[:2]:
        load(Catalog(store), synthetic, size - held, max(1, size // FILINGS_PER_COMPANY), None)
        held = size
        compact(corpus, env, work)
        spent[size] = statistics.median(run() for _ in range(1 if quick else 3))
        print(f"fleet, {size:,} entries: run {spent[size]:.2f} CPU s (producer and workers)", flush=True)
    small, large = sizes[0], sizes[1]
    return spent[large] / spent[small]


def concurrent_lane(fleet: FleetParts, work: Path, members: int) -> int:
    """Two ingests of feed archives of distinct filings into one S3 corpus at once: the filings
    missing from its catalogue after both."""
    bases = bases_in(EDGAR / "filings", SHARED / "edgar-nc")
    archives = []
    for i in range(2):
        made = copies(bases, members, date(2025, 4, 1 + i), start=i * members)
        archives.append(write_archive(work / f"concurrent-{i}.nc.tar.gz", ((c.name, c.data) for c in made)))
    corpus = f"s3://{fleet.bucket}/concurrent"
    procs: list[subprocess.Popen] = []
    for i, archive in enumerate(archives):
        log = (work / f"concurrent-{i}.err").open("w")
        procs.append(
            subprocess.Popen(
                [PRISM, "ingest", str(archive), "--corpus", corpus], cwd=work, env=fleet.env, stdout=log, stderr=log
            )
        )
    codes = [p.wait(timeout=3600) for p in procs]
    if any(codes):
        print(f"concurrent ingests exited {codes}: {(work / 'concurrent-0.err').read_text()[-500:]}", flush=True)
    with Environ(fleet.env):
        held = Catalog(open_store(corpus, load_settings())).all_filings()
    lost = 2 * members - len(held)
    print(f"concurrent ingests of {members} members each: {len(held)} filings catalogued, {lost} lost", flush=True)
    return lost


def backfill_lane(fleet: FleetParts, work: Path, full: Path, members: int) -> tuple[float, float]:
    """A feed day ingested on the 2 workers into an empty local corpus and into ``full``."""
    day = build_day(work, members)
    rates = []
    for corpus in (work / "backfill-empty", full):
        began = time.perf_counter()
        measured(["ingest", str(day.archive), "--corpus", str(corpus)], fleet.env, work)
        rates.append(members / (time.perf_counter() - began))
        print(f"backfill of {members} members into {corpus.name}: {rates[-1]:.1f} filings/s", flush=True)
    return rates[0], rates[1]


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    sizes = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="prism-scale-"))
    fleet: FleetParts | None = None
    try:
        stages, per_100k, at_100k = embedded_lane(work, sizes, quick)
        fleet = FleetParts(work)
        fleet_ratio = fleet_run_lane(fleet, work, sizes, quick)
        lost = concurrent_lane(fleet, work, 20 if quick else 1000)
        empty, full = backfill_lane(fleet, work, at_100k, 40 if quick else 5000)
    finally:
        if fleet is not None:
            fleet.close()
        shutil.rmtree(work, ignore_errors=True)
    small, large = stages[0], stages[-1]
    print(f"total {time.perf_counter() - began:.0f} s", flush=True)
    report(
        run_s_ratio_1m=median(large.run, "cpu_s") / median(small.run, "cpu_s"),
        new_night_s_ratio_1m=large.new_night_s / small.new_night_s,
        ingest1_s_ratio_1m=median(large.ingest1, "cpu_s") / median(small.ingest1, "cpu_s"),
        peak_rss_ratio_1m=large.rss_mb / small.rss_mb,
        peak_rss_mb_1m=large.rss_mb,
        ls_cik_s_1m=median(large.ls_cik, "wall_s"),
        synthetic_found=int(all(s.found for s in stages)),
        catalog_write_s_per_100k=per_100k["write_s"],
        catalog_mb_per_100k=per_100k["mb"],
        fleet_run_s_ratio=fleet_ratio,
        concurrent_lost=lost,
        filings_per_s_2w_empty=empty,
        filings_per_s_2w_full=full,
        backfill_full_over_empty=full / empty,
    )


if __name__ == "__main__":
    main()
