"""Backfill of an EDGAR daily feed: `prism ingest` of one day's archive (``YYYYMMDD.nc.tar.gz``)
into a local-folder corpus, embedded and on 1, 2 and 4 celery worker processes.

The day is made of the shared real filings (prism/testing/feed.py): N copies (2000; 100 with
`--quick`), each under its own accession number, every other one in the feed's ``.nc`` header
form and the rest in the SEC ``.txt`` header form, every 10th labelled 10-K, with the day's form
index beside the archive. A real feed day is mostly small filings, so the copies cycle through a
list of 20 bases per big one: each big base (the 10-Qs and the prospectus, over 1 MB of
documents) once and the small ones (8-Ks, an SC 13G, a Form D, ... of 9 KB to 250 KB) 19 times,
so 1 copy in 20 is big and a big copy falls on either header form, 10-K label or not.

Each configuration ingests the archive into a corpus folder of its own, timed over the whole
`ingest()` call (the producer lists the archive, then one task per member): embedded (no broker,
the producer's own worker threads), then 1, 2 and 4 `celery worker` processes (prefork,
concurrency 1 each) on a Redis DB of their own, started and ready before the clock starts (a
fresh worker's first task loads the tokenizer, inside the time: it weighs on `--quick`'s figures,
not on the full day's). Every configuration must ingest all N filings without a failure. The
archive and the corpus are local paths: no S3 server takes part.

    filings_per_s_Nw          N filings over the wall seconds of the ingest on N workers
    scale2, scale4            the 2- and 4-worker rates over the 1-worker rate
    peak_rss_mb_per_worker    the largest peak RSS (VmHWM) of a worker's pool process, the one
                              that runs the tasks, read just before the workers stop
    disk_bytes_written_ratio  on 2 workers: the bytes the producer (this process, over the
                              ingest) and the workers (their whole lives, less their log files:
                              stdout, which a deployment hands to its log collector) sent to the
                              block layer (/proc/PID/io write_bytes less cancelled_write_bytes:
                              the pages they dirtied, their files', directories' and inodes',
                              less those of files deleted before they were written back), over
                              the same count for writing the finished corpus once (copied by
                              this process, file by file, on the same file system): 1 is an
                              ingest that wrote nothing but its corpus, once. A line before the
                              last gives it over the corpus's bytes as `du` counts them, over
                              its files' own bytes, and by write calls (wchar)
    reingest_same_archive_tasks  tasks sent by a second ingest of the same archive into the
                              1-worker corpus (summary.sources - summary.skipped): 0 expected
    filtered_members_opened   with `--forms 10-K` into fresh corpora (on the 1-worker fleet),
                              once deciding on the members' headers and once on the form index
                              (`--index`): the members read past their header by tasks that
                              are no 10-K, the larger of the two runs; 0 expected

    python bench/backfill.py
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from _common import SHARED, parser, redis_db, report

from prism.ingest.models import Chunking
from prism.testing.feed import Base, Copy, bases_in, copies, form_index, write_archive
from producer.archives import Filter, filter_of
from producer.ingest import ingest
from workers.corpus import IngestSummary
from workers.settings import load_settings
from workers.testing import WorkerProcess, fleet_env

KEYS = (
    "filings_per_s_1w",
    "scale2",
    "scale4",
    "peak_rss_mb_per_worker",
    "disk_bytes_written_ratio",
    "reingest_same_archive_tasks",
    "filtered_members_opened",
    "filings_per_s_embedded",
    "filings_per_s_2w",
    "filings_per_s_4w",
    "members",
)
DAY = date(2025, 3, 18)
BIG = 1_000_000  # bytes of documents that make a base big
SMALL_PER_BIG = 19  # a big copy in every 20
TEN_K_EVERY = 10
REDIS_DB = 10  # a DB no other benchmark uses and below the tests' (11 and up): it is flushed
BIG_AT = (0, 5, 12, 17)  # where each big base falls in its block of 20: both header forms, 10-K or not


def day_bases() -> list[Base]:
    """The bases the copies cycle through: per big base, a block of 20 with it once and the
    small bases in turn in the other places."""
    bases = bases_in(SHARED / "edgar" / "filings", SHARED / "edgar-nc")
    big = [b for b in bases if len(b.documents) > BIG]
    small = [b for b in bases if len(b.documents) <= BIG]
    assert big and small, f"the shared filings give {len(big)} big and {len(small)} small bases"
    smalls = iter(small * (SMALL_PER_BIG * len(big)))
    out = []
    for i, base in enumerate(big):
        block = [next(smalls) for _ in range(SMALL_PER_BIG)]
        block.insert(BIG_AT[i % len(BIG_AT)], base)
        out += block
    return out


@dataclass(frozen=True)
class Day:
    archive: Path
    index: Path
    filings: int
    ten_ks: int
    big: int
    archive_bytes: int
    member_bytes: int


def build_day(folder: Path, n: int) -> Day:
    """The day's archive and form index in ``folder``."""
    made: list[Copy] = []
    bases = day_bases()
    big = {b.name for b in bases if len(b.documents) > BIG}
    big_copies = 0
    member_bytes: list[int] = []

    def members() -> Iterator[tuple[str, bytes]]:
        nonlocal big_copies
        for i, copy in enumerate(copies(bases, n, DAY, ten_k_every=TEN_K_EVERY, nc_every=2)):
            big_copies += bases[i % len(bases)].name in big
            made.append(replace(copy, data=b""))  # the index needs the header fields only
            yield copy.name, copy.data
            member_bytes.append(len(copy.data))

    archive = write_archive(folder / f"{DAY:%Y%m%d}.nc.tar.gz", members())
    index = folder / f"form.{DAY:%Y%m%d}.idx"
    index.write_text(form_index(made))
    ten_ks = sum(c.form == "10-K" for c in made)
    assert len(made) == n and len({c.accession for c in made}) == n, "copies with the same accession number"
    return Day(archive, index, n, ten_ks, big_copies, archive.stat().st_size, sum(member_bytes))


# --- processes: their tree, peak RSS and I/O, read from /proc ---


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            found.setdefault(ppid, []).append(int(entry.name))
    return found


def tree(pid: int) -> list[int]:
    """The process and all its descendants."""
    children, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """The CPU seconds a process has used (user and system), its reaped children's with them."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def io_of(pid: int | str = "self") -> dict[str, int]:
    """/proc/PID/io; a process's own counts include those of the children it has reaped."""
    lines = Path(f"/proc/{pid}/io").read_text().splitlines()
    return {k: int(v) for k, v in (line.split(": ") for line in lines if line)}


@dataclass
class Sample:
    """The worker processes' figures, read just before they stop."""

    pool_rss_mb: list[float] = field(default_factory=list)  # each pool process's peak RSS
    main_rss_mb: list[float] = field(default_factory=list)  # each worker's main process
    write_bytes: int = 0  # net of cancelled_write_bytes: pages dirtied, less those deleted before writeback
    wchar: int = 0
    cpu_s: float = 0.0


class Workers:
    """``n`` `celery worker` processes (concurrency 1) on one broker, started together."""

    def __init__(self, env: dict[str, str], folder: Path, n: int):
        self.started: list[WorkerProcess] = []
        errors: list[BaseException] = []

        def start(i: int) -> None:
            try:
                self.started.append(WorkerProcess(env, folder / f"worker-{n}w-{i}.log", concurrency=1))
            except BaseException as err:  # noqa: BLE001 - raised below, once all are started or not
                errors.append(err)

        threads = [threading.Thread(target=start, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]

    def sample(self) -> Sample:
        found = Sample()
        for worker in self.started:
            for pid in tree(worker.proc.pid):
                try:
                    rss, io, cpu = peak_rss_mb(pid), io_of(pid), cpu_s(pid)
                except OSError:
                    continue
                (found.main_rss_mb if pid == worker.proc.pid else found.pool_rss_mb).append(rss)
                found.write_bytes += io["write_bytes"] - io["cancelled_write_bytes"]
                found.wchar += io["wchar"]
                found.cpu_s += cpu
        return found

    def stop(self) -> None:
        for worker in self.started:
            worker.stop()
        self.started = []


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def disk_bytes(folder: Path) -> int:
    """The folder as the disk holds it, as `du` counts it: whole blocks of its files and of its
    directories (a 1 KB file takes 4 KiB, and so does a folder of a few entries)."""
    return sum(p.lstat().st_blocks * 512 for p in (folder, *folder.rglob("*")))


def disk_bytes_of(paths) -> int:
    return sum(p.stat().st_blocks * 512 for p in paths)


def written_once(folder: Path, to: Path) -> int:
    """The block-layer bytes of writing ``folder`` once, by plain reads and writes into ``to``
    on the same file system: its files, directories and inodes, as the ingest pays them."""
    before = io_of()
    shutil.copytree(folder, to, copy_function=lambda src, dst: Path(dst).write_bytes(Path(src).read_bytes()))
    after = io_of()
    return (after["write_bytes"] - before["write_bytes"]) - (
        after["cancelled_write_bytes"] - before["cancelled_write_bytes"]
    )


def disk_write_ratio(corpus: Path, work: Path, before: dict[str, int], after: dict[str, int], sample: Sample) -> float:
    """What the 2-worker ingest (the producer over it, the workers over their lives) sent to the
    block layer, over what writing its corpus once takes; the parts said on a line."""
    producer = {k: after[k] - before[k] for k in ("write_bytes", "cancelled_write_bytes", "wchar")}
    producer["write_bytes"] -= producer.pop("cancelled_write_bytes")
    # the workers' stdout goes to a file here; a deployment hands it to its log collector
    logs = disk_bytes_of(work.glob("worker-2w-*.log"))
    written = producer["write_bytes"] + sample.write_bytes - logs
    wchar = producer["wchar"] + sample.wchar - logs
    once, stored, apparent = written_once(corpus, work / "corpus-copy"), disk_bytes(corpus), folder_bytes(corpus)
    shutil.rmtree(work / "corpus-copy")
    print(
        f"2 workers: corpus {stored / 1e6:.1f} MB on disk as du counts it ({apparent / 1e6:.1f} MB in its files),"
        f" {once / 1e6:.1f} MB written to the block layer by copying it once; the ingest wrote"
        f" {written / 1e6:.1f} MB (ratio {written / once:.3g}; over du {written / stored:.3g}, over the files' bytes"
        f" {written / apparent:.3g}): producer {producer['write_bytes'] / 1e6:.1f} MB, workers"
        f" {(sample.write_bytes - logs) / 1e6:.1f} MB and {logs / 1e6:.1f} MB of logs not counted;"
        f" by write calls (wchar) {wchar / 1e6:.1f} MB (ratio {wchar / apparent:.3g} of the files' bytes)",
        flush=True,
    )
    return written / once


def timed_ingest(day: Day, corpus: Path, chosen: Filter = Filter()) -> tuple[IngestSummary, float]:
    """`prism ingest` of the day into ``corpus`` with the settings of this process's environment."""
    settings = load_settings()
    began = time.perf_counter()
    summary = ingest(str(day.archive), str(corpus), settings, Chunking(), chosen=chosen)
    return summary, time.perf_counter() - began


def check_whole(summary: IngestSummary, day: Day, what: str) -> None:
    assert summary.ingested == day.filings and summary.failed == 0, (
        f"{what}: {summary.ingested} of {day.filings} filings ingested, {summary.failed} failed: {summary.failures[:3]}"
    )


def check_filtered(summary: IngestSummary, day: Day, what: str) -> int:
    """The members a filtered ingest read that are no 10-K."""
    assert summary.failed == 0, f"{what}: {summary.failed} failed: {summary.failures[:3]}"
    assert summary.opened == day.ten_ks and summary.ingested == day.ten_ks, (
        f"{what}: {summary.opened} members opened, {summary.ingested} ingested, of {day.ten_ks} 10-Ks"
    )
    assert summary.left_out == day.filings - day.ten_ks, (
        f"{what}: {summary.left_out} members left out, not {day.filings - day.ten_ks}"
    )
    return summary.opened - day.ten_ks


def again_and_filtered(day: Day, work: Path, corpus: Path) -> tuple[int, int]:
    """On the fleet of this process's environment: the tasks a second ingest of the archive into
    ``corpus`` sends, and the most members that are no 10-K a `--forms 10-K` ingest into a fresh
    corpus opens, deciding on the members' headers, then on the form index."""
    again, again_s = timed_ingest(day, corpus)
    tasks = again.sources - again.skipped
    assert tasks == 0 and again.unchanged == day.filings, (
        f"the same archive again: {tasks} task(s) sent, {again.unchanged} of {day.filings} filings unchanged"
    )
    print(f"the same archive again: {tasks} tasks, {again_s:.2f} s", flush=True)
    opened = []
    for index in (None, day.index):
        chosen = filter_of(load_settings(forms="10-K"), str(index) if index else None)
        what = f"--forms 10-K{' --index' if index else ''}"
        found, found_s = timed_ingest(day, work / f"corpus-10k{'-index' if index else ''}", chosen)
        opened.append(check_filtered(found, day, what))
        print(f"{what}: {found.opened} members opened of {day.filings}, {found_s:.1f} s", flush=True)
    return tasks, max(opened)


class Environ:
    """This process's environment replaced by ``env`` while in the block (the settings read it)."""

    def __init__(self, env: dict[str, str]):
        self.env, self.saved = env, dict(os.environ)

    def __enter__(self):
        os.environ.clear()
        os.environ.update(self.env)

    def __exit__(self, *exc):
        os.environ.clear()
        os.environ.update(self.saved)


def main() -> None:
    quick = parser(__doc__).parse_args().quick
    n = 100 if quick else 2000
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="prism-backfill-"))
    fleets: list[Workers] = []
    try:
        day = build_day(work, n)
        print(
            f"day: {day.filings} filings ({day.big} big, {day.ten_ks} labelled 10-K), members {day.member_bytes / 1e6:.1f} MB,"
            f" archive {day.archive_bytes / 1e6:.1f} MB, built in {time.perf_counter() - began:.1f} s",
            flush=True,
        )
        rates: dict[str, float] = {}
        with Environ(fleet_env(None, None, None)):
            cpu = os.times()
            summary, seconds = timed_ingest(day, work / "corpus-embedded")
            cpu_after = os.times()
        check_whole(summary, day, "embedded")
        rates["embedded"] = n / seconds
        busy = cpu_after.user + cpu_after.system - cpu.user - cpu.system
        print(f"embedded: {seconds:.1f} s; CPU seconds {busy:.1f}", flush=True)

        env = fleet_env(redis_db(REDIS_DB), None, None)
        pool_rss: list[float] = []
        with Environ(env):
            for workers in (1, 2, 4):
                fleet = Workers(env, work, workers)
                fleets.append(fleet)
                corpus = work / f"corpus-{workers}w"
                before, cpu = io_of(), os.times()
                summary, seconds = timed_ingest(day, corpus)
                after, cpu_after, busy = io_of(), os.times(), fleet.sample().cpu_s
                check_whole(summary, day, f"{workers} worker(s)")
                rates[f"{workers}w"] = n / seconds
                producer_cpu = cpu_after.user + cpu_after.system - cpu.user - cpu.system
                print(
                    f"{workers} worker(s): {seconds:.1f} s; CPU seconds: producer {producer_cpu:.1f},"
                    f" workers {busy:.1f} (their start included)",
                    flush=True,
                )
                if workers == 1:
                    reingest_tasks, opened = again_and_filtered(day, work, corpus)
                sample = fleet.sample()
                fleet.stop()
                pool_rss += sample.pool_rss_mb
                print(
                    f"{workers} worker(s): peak RSS of the pool processes {', '.join(f'{r:.0f}' for r in sample.pool_rss_mb)} MB,"
                    f" of the main processes {', '.join(f'{r:.0f}' for r in sample.main_rss_mb)} MB",
                    flush=True,
                )
                if workers == 2:
                    write_ratio = disk_write_ratio(corpus, work, before, after, sample)
    finally:
        for fleet in fleets:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"total {time.perf_counter() - began:.0f} s", flush=True)
    report(
        filings_per_s_1w=rates["1w"],
        scale2=rates["2w"] / rates["1w"],
        scale4=rates["4w"] / rates["1w"],
        peak_rss_mb_per_worker=max(pool_rss),
        disk_bytes_written_ratio=write_ratio,
        reingest_same_archive_tasks=reingest_tasks,
        filtered_members_opened=opened,
        filings_per_s_embedded=rates["embedded"],
        filings_per_s_2w=rates["2w"],
        filings_per_s_4w=rates["4w"],
        members=n,
    )


if __name__ == "__main__":
    main()
