"""Archives on the fleet: a feed day's `.nc.tar.gz` in S3 ingested by workers that read each
member by ranged GETs, with the same result as its unpacked folder; a worker killed with
SIGKILL in the middle of one loses no member, and the next run sends only what is missing."""

import re
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from prism.testing.feed import bases_in, copies, write_archive
from tests.conftest import SHARED
from workers.corpus import Corpus
from workers.store import LocalStore, S3Store
from workers.testing import fleet_env, prism_cli, s3_client

DAY = date(2024, 3, 1)
SUMMARY = re.compile(r"(\d+) sources: (\d+) filings ingested, .*?, (\d+) unchanged \((\d+) files not read again\)")


def _day(n: int, largest: int = 300_000):
    bases = [b for b in bases_in(SHARED / "edgar" / "filings", SHARED / "edgar-nc") if len(b.documents) < largest]
    return list(copies(bases, n, DAY, ten_k_every=5))


def test_an_archive_in_s3_ingests_on_workers_as_its_folder_does(tmp_path, redis_url, s3_server, bucket, start_worker):
    day = _day(16)
    archive = write_archive(tmp_path / "20240301.nc.tar.gz", [(c.name, c.data) for c in day])
    client = s3_client(s3_server)
    client.upload_file(str(archive), bucket, "feed/20240301.nc.tar.gz")
    folder = tmp_path / "day"
    folder.mkdir()
    for c in day:
        (folder / c.name).write_bytes(c.data)
    env = fleet_env(redis_url, s3_server, None)
    start_worker(env, 1)
    start_worker(env, 1)
    uri = f"s3://{bucket}/feed/20240301.nc.tar.gz"
    done = prism_cli(["ingest", uri, "--corpus", f"s3://{bucket}/from-archive"], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(day)} sources: {len(day)} filings ingested" in done.stderr, done.stderr
    again = prism_cli(["ingest", uri, "--corpus", f"s3://{bucket}/from-archive"], env, tmp_path, timeout=300)
    assert (
        f"1 sources: 0 filings ingested, 0 new versions, {len(day)} unchanged (1 files not read again)" in again.stderr
    )
    unpacked = prism_cli(["ingest", str(folder), "--corpus", f"s3://{bucket}/from-folder"], env, tmp_path, timeout=300)
    assert unpacked.returncode == 0, unpacked.stderr
    packed, plain = (Corpus(S3Store(bucket, name, client)) for name in ("from-archive", "from-folder"))
    heads, folder_heads = packed.catalog.all_filings(), plain.catalog.all_filings()
    assert sorted(heads) == sorted(folder_heads) == sorted(c.name.rsplit(".", 1)[0] for c in day)
    for fid, head in heads.items():
        ours, theirs = packed.get_filing(fid, head.latest), plain.get_filing(fid, folder_heads[fid].latest)
        assert ours.meta.source_uri == f"{uri}#{fid}.{'nc' if ours.meta.source_uri.endswith('.nc') else 'txt'}"
        assert ours.meta.model_dump(exclude={"source_uri"}) == theirs.meta.model_dump(exclude={"source_uri"})
        assert [c.text for c in ours.chunks] == [c.text for c in theirs.chunks]
    logs = "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))
    assert logs.count("prism.ingest_file") >= len(day)  # each member a task on the workers


def test_a_worker_killed_mid_archive_loses_no_member_and_the_next_run_sends_only_the_missing(
    tmp_path, redis_url, s3_server, bucket, start_worker
):
    day = _day(90, largest=3_000_000)  # the 10-Qs too: a member takes a while
    archive = write_archive(tmp_path / "20240301.nc.tar.gz", [(c.name, c.data) for c in day])
    env = fleet_env(
        redis_url, s3_server, None, PRISM_VISIBILITY_TIMEOUT_S="5", PRISM_STALL_S="60", PRISM_INGEST_CHECKPOINT_S="1"
    )
    corpus = tmp_path / "corpus"
    victim = start_worker(env, 1)
    cmd = [str(Path(sys.executable).parent / "prism"), "ingest", str(archive), "--corpus", str(corpus)]
    producer = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    recorded: list[str] = []
    deadline = time.monotonic() + 240
    while len(recorded) < 5 and time.monotonic() < deadline:  # the producer's checkpoints of what is done
        time.sleep(0.5)
        recorded = _checkpointed(corpus)
        assert producer.poll() is None, producer.communicate()[1]
    assert 5 <= len(recorded) < len(day), len(recorded)
    victim.stop(signal.SIGKILL)  # the worker, parent and child, mid-member
    producer.send_signal(signal.SIGKILL)  # and the run with it
    producer.communicate()
    recorded = _checkpointed(corpus)
    start_worker(env, 2)
    done = prism_cli(["ingest", str(archive), "--corpus", str(corpus)], env, tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    sources, ingested, unchanged, skipped = map(int, SUMMARY.search(done.stderr).groups())  # type: ignore[union-attr]
    assert skipped == len(recorded) and sources == len(day)  # sent: only the members not recorded
    catalog = Corpus(LocalStore(corpus)).catalog
    assert len(catalog.all_filings()) == len(day) and catalog.failures() == {}
    whole = catalog.sources([str(archive)])[str(archive)]  # whole now: one source for the next run
    assert whole.state == "done" and whole.entry is not None and len(whole.entry.filings) == len(day)


def _checkpointed(corpus: Path) -> list[str]:
    """The archive members an ingest's checkpoints appended to the catalogue as done."""
    if not (corpus / "catalog" / "sources").exists():
        return []
    rows = Corpus(LocalStore(corpus)).catalog.sources()
    return [uri for uri, row in rows.items() if "#" in uri and row.state == "done"]
