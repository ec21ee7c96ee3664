"""The corpus catalogue (workers/catalog.py) end to end: a corpus kept in the format before it
(one manifest.json) is refused by the commands that read it, upgraded once by `prism corpus
upgrade` or by the first ingest, and a `--new` run over it then reuses every result without an
LLM call; two ingests into one corpus on S3 at once lose no filing; and planning a question
reads the company index and its company's partition of the filings table, never the corpus."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from prism.corpus.companies import company_of
from prism.ingest.models import CorpusManifest, FilingEntry, FilingMeta, IngestFailure, VersionEntry
from prism.models import FILING_TYPES, RunConfig
from prism.runs.planning import choose, in_scope
from prism.runs.questions import Question
from prism.testing.feed import Copy, bases_in, copies, write_archive
from prism.testing.simulator import SimulatorConfig
from producer.ingest import ingest_source
from tests.conftest import SHARED
from tests.filings import pdf
from workers.catalog import BUCKETS, Catalog, VersionGone, bucket_of
from workers.corpus import Corpus
from workers.store import LocalStore, S3Store
from workers.testing import fleet_env, prism_cli, s3_client

ACME = {
    "acme_2022_10k": ["Acme annual report 2022 cover.", "Widget revenue was 40 million dollars in fiscal 2022."],
    "acme_2023_10k": [
        "Acme annual report 2023 cover.",
        "Board of directors.",
        "Widget revenue was 55 million in 2023.",
    ],
}
QUESTIONS = [
    {"id": "rev22", "question": "What was widget revenue in FY2022?", "scope": {"company": "Acme"}},
    {"id": "rev23", "question": "What was widget revenue in 2023?", "scope": {"company": "Acme"}},
]


# -- helpers ------------------------------------------------------------------------------------


def acme_folder(folder: Path) -> Path:
    """Acme's two annual reports as PDFs with their metadata, and a file that gives no filing."""
    folder.mkdir()
    for name, pages in ACME.items():
        (folder / f"{name}.pdf").write_bytes(pdf(pages))
        meta = {"company": "Acme", "form_type": "10-K", "year": int(name.split("_")[1])}
        (folder / f"{name}.meta.json").write_text(json.dumps(meta))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nnot really")
    return folder


def downgrade(corpus: Path) -> CorpusManifest:
    """Turn a corpus back into the format before the catalogue: what its catalogue holds written
    as one manifest.json, the catalog/ tables deleted (the filings and their inputs stay)."""
    catalog = Corpus(LocalStore(corpus)).catalog
    sources = catalog.sources()
    manifest = CorpusManifest(
        filings=catalog.all_filings(),
        sources={uri: row.entry for uri, row in sources.items() if row.state == "done" and row.entry},
        failures={
            uri: IngestFailure(source=uri, reason=row.reason or "", at=row.at or datetime.now(UTC))
            for uri, row in sources.items()
            if row.state == "failed"
        },
        written_at=datetime.now(UTC),
    )
    (corpus / "manifest.json").write_text(manifest.model_dump_json())
    shutil.rmtree(corpus / "catalog")
    return manifest


def assert_catalogue_holds(corpus: Path, manifest: CorpusManifest) -> None:
    """The corpus is kept in its catalogue now, holding what the old manifest.json held."""
    assert not (corpus / "manifest.json").exists() and (corpus / "manifest.upgraded.json").exists()
    catalog = Corpus(LocalStore(corpus)).catalog
    assert catalog.all_filings() == manifest.filings
    sources = catalog.sources()
    assert {uri: row.entry for uri, row in sources.items() if row.state == "done"} == manifest.sources
    assert {uri: row.reason for uri, row in catalog.failures().items()} == {
        uri: failure.reason for uri, failure in manifest.failures.items()
    }


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run_files(results: Path, run_id: str) -> dict:
    """What a run wrote that the checks read: its manifest, cost, plan rows and evidence table."""
    folder = results / "runs" / run_id
    return {
        "manifest": json.loads((folder / "manifest.json").read_text()),
        "cost": json.loads((folder / "cost.json").read_text()),
        "plan": [json.loads(line) for line in (folder / "plan.jsonl").read_text().splitlines()],
        "evidence": list(csv.DictReader(io.StringIO((folder / "evidence.csv").read_text()))),
    }


def pairs_of(plan: list[dict]) -> list[tuple[str, str, str]]:
    return sorted((row["query_id"], row["filing"], row["version"]) for row in plan if row["task"] == "chunks")


def feed_day(day: date, n: int, start: int) -> list[Copy]:
    """``n`` real filings (under 300 kB each) filed on ``day``, the ``start``-th accession number on."""
    bases = [b for b in bases_in(SHARED / "edgar" / "filings", SHARED / "edgar-nc") if len(b.documents) < 300_000]
    return list(copies(bases, n, day, start=start))


def members_done(catalog: Catalog, archive: str, day: list[Copy]) -> int:
    """How many of an archive's members an ingest's checkpoints have recorded as done so far."""
    rows = catalog.sources([f"{archive}#{c.name}" for c in day])
    return sum(row.state == "done" for row in rows.values())


def synthetic_heads(n: int, companies: int) -> dict[str, FilingEntry]:
    """``n`` filing heads spread over ``companies`` companies, each with a CIK of its own."""
    now = datetime.now(UTC)
    heads = {}
    for i in range(n):
        company = i % companies
        meta = FilingMeta(
            company=f"Synthetic Holdings {company:04d}",
            cik=f"{1_000_000 + company:010d}",
            form_type="10-K",
            fiscal_year=2015 + i // companies,
            source_uri=f"synthetic/{i}.txt",
        )
        version = VersionEntry(
            version=f"v{i}", content_sha256="0" * 64, key=f"filings/s{i}.json.gz", ingested_at=now, chunks=1, tokens=9
        )
        heads[f"synthetic-{i:05d}"] = FilingEntry(
            id=f"synthetic-{i:05d}", meta=meta, latest=version.version, versions=[version], updated_at=now
        )
    return heads


# -- the tests ----------------------------------------------------------------------------------


def test_an_old_corpus_is_refused_by_readers_upgraded_once_and_new_reuses_every_result(tmp_path, simulator):
    simulator.config = SimulatorConfig(mode="lexical")
    results, corpus = tmp_path / "res", tmp_path / "corpus"
    env = fleet_env(None, None, simulator.url, PRISM_RESULTS=str(results))
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    ingest = prism_cli(["ingest", str(acme_folder(tmp_path / "filings")), "--corpus", str(corpus)], env, tmp_path)
    assert ingest.returncode == 3 and "2 filings ingested" in ingest.stderr, ingest.stderr  # broken.pdf failed
    run = ["run", "--questions", str(questions), "--corpus", str(corpus), "--new", "--run-id"]
    first = prism_cli([*run, "night-1"], env, tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    ranked = run_files(results, "night-1")
    served = simulator.stats["ok"]
    assert served > 0 and ranked["cost"]["total"]["calls"] > 0  # ranked by the LLM, over HTTP

    manifest = downgrade(corpus)
    old = files_of(corpus)
    plain = fleet_env(None, None, None, PRISM_RESULTS=str(results))
    for read in (["corpus", "ls"], ["estimate", "--questions", str(questions)]):
        refused = prism_cli([*read, "--corpus", str(corpus)], plain, tmp_path)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert len(refused.stderr.splitlines()) == 1, refused.stderr  # one line, no traceback
        assert f"run `prism corpus upgrade --corpus {corpus}`" in refused.stderr
    assert files_of(corpus) == old  # nothing written

    upgraded = prism_cli(["corpus", "upgrade", "--corpus", str(corpus)], plain, tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"2 filings moved into the catalogue of {corpus}" in upgraded.stderr
    assert_catalogue_holds(corpus, manifest)
    again = prism_cli(["corpus", "upgrade", "--corpus", str(corpus)], plain, tmp_path)
    assert again.returncode == 0 and f"{corpus}: nothing to upgrade" in again.stderr, again.stderr

    second = prism_cli([*run, "night-2"], env, tmp_path, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "2 unchanged (their results reused at $0)" in second.stderr, second.stderr
    reran = run_files(results, "night-2")
    assert simulator.stats["ok"] == served and reran["cost"]["total"]["calls"] == 0  # no LLM request
    assert reran["manifest"]["status"] == "complete" and reran["manifest"]["counts"]["reused"] == 2
    assert pairs_of(reran["plan"]) == pairs_of(ranked["plan"])  # the same filing versions: the same job ids
    for row in (r for r in reran["plan"] if r["task"] == "chunks"):
        assert row["state"] == "reused" and row["since"] == "night-1"
        assert (results / row["reused"]).is_file() and row["reused"].startswith("index/results/")  # outlives night-1
    assert reran["evidence"] == ranked["evidence"] and len(reran["evidence"]) > 0


def test_the_first_ingest_into_an_old_corpus_upgrades_it_and_reads_no_unchanged_file_again(tmp_path):
    env, corpus = fleet_env(None, None, None), tmp_path / "corpus"
    ingest = ["ingest", str(acme_folder(tmp_path / "filings")), "--corpus", str(corpus)]
    assert prism_cli(ingest, env, tmp_path).returncode == 3  # broken.pdf gives no filing
    manifest = downgrade(corpus)
    again = prism_cli(ingest, env, tmp_path)
    assert again.returncode == 3, again.stderr
    # the sources' fingerprints came over: the two filings are not read, broken.pdf is tried again
    assert "3 sources: 0 filings ingested, 0 new versions, 2 unchanged (2 files not read again), 1 failed" in (
        again.stderr
    )
    assert_catalogue_holds(corpus, manifest)


def test_two_ingests_into_one_corpus_on_s3_at_once_lose_nothing(tmp_path, s3_server, bucket):
    client = s3_client(s3_server)
    days = {
        f"s3://{bucket}/feed/{day:%Y%m%d}.nc.tar.gz": feed_day(day, 30, start)
        for day, start in ((date(2024, 3, 1), 0), (date(2024, 3, 4), 30))
    }
    for uri, day in days.items():
        name = uri.rsplit("/", 1)[1]
        write_archive(tmp_path / name, [(c.name, c.data) for c in day])
        client.upload_file(str(tmp_path / name), bucket, f"feed/{name}")
    env = fleet_env(None, s3_server, None, PRISM_INGEST_CHECKPOINT_S="0.2")  # a commit every few members
    prism, corpus = str(Path(sys.executable).parent / "prism"), f"s3://{bucket}/corpus"
    ingests = [
        subprocess.Popen([prism, "ingest", uri, "--corpus", corpus], env=env, stderr=subprocess.PIPE, text=True)
        for uri in days
    ]
    catalog = Corpus(S3Store(bucket, "corpus", client)).catalog
    both_committed = False  # while both were running, each had appended some members to the catalogue
    deadline = time.monotonic() + 120
    while not both_committed and all(p.poll() is None for p in ingests) and time.monotonic() < deadline:
        time.sleep(0.3)
        both_committed = all(members_done(catalog, uri, day) for uri, day in days.items())
    errors = [p.communicate(timeout=300)[1] for p in ingests]
    assert [p.returncode for p in ingests] == [0, 0], errors
    assert both_committed, errors  # the two ingests' commits did overlap
    for err, day in zip(errors, days.values()):
        assert f"{len(day)} sources: {len(day)} filings ingested" in err, err
    wanted = {c.name.rsplit(".", 1)[0] for day in days.values() for c in day}
    assert len(wanted) == 60 and set(catalog.all_filings()) == wanted
    sources = catalog.sources(list(days))
    for uri, day in days.items():
        assert sources[uri].state == "done" and sources[uri].entry is not None
        assert set(sources[uri].entry.filings) == {c.name.rsplit(".", 1)[0] for c in day}


def test_planning_a_question_reads_its_companys_partition_and_the_company_index_alone(tmp_path):
    store = LocalStore(tmp_path / "corpus")
    synthetic = synthetic_heads(3_000, companies=1_000)
    Catalog(store).append(synthetic)
    assert {bucket_of(company_of(head.meta)) for head in synthetic.values()} == set(range(BUCKETS))
    trust = next(b for b in bases_in(SHARED / "edgar" / "filings") if b.company == "COMMON SENSE TRUST")
    folder = tmp_path / "day"
    folder.mkdir()
    for filing in copies([trust], 3, date(2024, 3, 1)):
        (folder / filing.name).write_bytes(filing.data)
    assert ingest_source(folder, store).ingested == 3  # real filings, stored, of one company
    theirs = {fid for fid, head in Catalog(store).all_filings().items() if head.meta.company == trust.company}
    assert len(theirs) == 3

    version = Catalog(store).versions()
    corpus = Corpus(store, version)  # as the planning task opens it (tasks/planning.py _view)
    view = corpus.view()
    question = Question(id="q", question="What did the trust report?", scope={"company": "Common Sense Trust"}, line=1)
    scoped = in_scope(question, view)
    chosen = choose(question, scoped, dict.fromkeys(FILING_TYPES, 1.0), RunConfig(), view, store.uri)
    assert {fid for fid, _ in scoped.pool} == theirs and chosen.error is None
    assert chosen.choices and {c.filing_id for c in chosen.choices} <= theirs

    reads, partition = corpus.catalog.reads, bucket_of(company_of(next(iter(scoped.pool))[1]))
    assert reads.buckets == {("filings", partition)}  # one of the 64
    assert reads.whole == ["companies"]
    assert len(theirs) <= reads.rows < (len(synthetic) + len(theirs)) // 10
    # The other companies' partitions are gone from the disk: planning never touched them, and
    # a read of the whole catalogue now fails.
    for other in range(BUCKETS):
        if other != partition:
            shutil.rmtree(tmp_path / "corpus" / "catalog" / "filings" / f"bucket={other}", ignore_errors=True)
    view = Corpus(store, version).view()
    assert {fid for fid, _ in in_scope(question, view).pool} == theirs
    with pytest.raises(FileNotFoundError):
        Catalog(store).all_filings()


def test_an_unchanged_folder_with_a_failed_file_writes_nothing_and_still_names_the_failure(tmp_path, s3_server, bucket):
    env, folder, client = fleet_env(None, s3_server, None), acme_folder(tmp_path / "filings"), s3_client(s3_server)
    ingest = ["ingest", str(folder), "--corpus", f"s3://{bucket}/corpus"]

    def stored() -> dict[str, str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="corpus/")
        return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}

    first = prism_cli(ingest, env, tmp_path)
    assert first.returncode == 3, first.stderr  # broken.pdf gives no filing
    failed = next(line for line in first.stderr.splitlines() if "not ingested:" in line)
    reason = failed.split("broken.pdf: ", 1)[1]
    before = stored()
    assert any("catalog/sources/_delta_log/" in key for key in before)
    again = prism_cli(ingest, env, tmp_path)
    assert again.returncode == 3, again.stderr
    assert stored() == before  # no Delta log entry, no data file, no head: nothing
    assert "3 sources: 0 filings ingested, 0 new versions, 2 unchanged (3 files not read again), 1 failed" in (
        again.stderr
    )
    known = next(line for line in again.stderr.splitlines() if "not ingested:" in line)
    assert f"{folder / 'broken.pdf'}: {reason}" in known and "unchanged since it failed" in known

    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nstill not really")  # changed: read again
    third = prism_cli(ingest, env, tmp_path)
    assert "2 unchanged (2 files not read again), 1 failed" in third.stderr, third.stderr
    logs = [k for k in set(stored()) - set(before) if "catalog/sources/_delta_log/" in k and k.endswith(".json")]
    assert len(logs) == 1  # its failure, recorded again for the file as it is now


def test_listing_failures_found_again_are_not_appended_again(tmp_path):
    folder, corpus = acme_folder(tmp_path / "filings"), tmp_path / "corpus"
    (folder / "metadata.jsonl").write_text(json.dumps({"file": "missing.pdf", "company": "Acme"}) + "\n")
    (folder / "gone.pdf").symlink_to(tmp_path / "nowhere.pdf")
    first = ingest_source(folder, LocalStore(corpus))
    assert len(first.failed_sources) == 3  # broken.pdf, the metadata line, the link to nothing
    before = files_of(corpus)
    again = ingest_source(folder, LocalStore(corpus))
    assert files_of(corpus) == before
    assert again.failed == 3 and len(again.failures) == 3  # each named again
    for source, reason in first.failed_sources.items():
        assert any(f.startswith(f"{source}: {reason}") for f in again.failures), again.failures


def test_a_resumed_run_plans_at_its_own_catalogue_versions_and_a_fresh_run_at_the_newest(tmp_path):
    bundled = Path(__file__).parents[2] / "prism" / "data" / "edgar" / "filings"
    folder, corpus, results, env = (
        tmp_path / "filings",
        tmp_path / "corpus",
        tmp_path / "results",
        fleet_env(None, None, None),
    )
    folder.mkdir()
    for name in (
        "sophiris-8k-2016-03-23_0001437749-16-028287.html",
        "common-sense-trust-24f-2nt-1995-12-28_0000950129-95-001652.txt",
    ):
        shutil.copy(bundled / name, folder)
    questions = tmp_path / "questions.jsonl"
    asked = [("soph", "Sophiris"), ("orcl", "Oracle")]
    questions.write_text(
        "".join(
            json.dumps({"id": i, "question": f"What did {c} announce?", "scope": {"company": c}}) + "\n"
            for i, c in asked
        )
    )
    ingest = ["ingest", str(folder), "--corpus", str(corpus)]
    run = ["run", "--questions", str(questions), "--corpus", str(corpus), "--results", str(results)]
    assert prism_cli(ingest, env, tmp_path).returncode == 0
    started = prism_cli([*run, "--run-id", "night-1"], env, tmp_path)
    pinned = run_files(results, "night-1")["manifest"]["corpus_versions"]
    assert started.returncode == 3 and pinned == {"filings": 0, "companies": 0}, started.stderr  # Oracle: none yet

    shutil.copy(bundled / "orcl-8k-2024-11-18.html", folder)  # a new company's filing comes in
    assert prism_cli(ingest, env, tmp_path).returncode == 0
    oracle = company_of(
        next(h for h in Catalog(LocalStore(corpus)).all_filings().values() if h.meta.ticker == "ORCL").meta
    )
    resumed = prism_cli(["resume", "night-1", "--results", str(results)], env, tmp_path)
    again = run_files(results, "night-1")
    assert resumed.returncode == 3, resumed.stderr
    assert again["manifest"]["corpus_versions"] == pinned
    assert all(row.get("filing") != "orcl-8k-2024-11-18" for row in again["plan"])  # neither the filing
    orcl = next(
        json.loads(line) for line in (results / "runs" / "night-1" / "questions.jsonl").open() if '"orcl"' in line
    )
    assert "holds no filing of company 'Oracle'" in orcl["error"]
    at_start = Corpus(LocalStore(corpus), pinned).catalog  # as its planning tasks open it
    assert at_start.filings_of([oracle]) == {} and oracle not in at_start.companies().table["company"].to_pylist()
    assert oracle in Catalog(LocalStore(corpus)).companies().table["company"].to_pylist()  # nor the company

    fresh = prism_cli([*run, "--run-id", "night-2"], env, tmp_path)
    night = run_files(results, "night-2")
    assert fresh.returncode == 0, fresh.stderr
    assert night["manifest"]["corpus_versions"] == {"filings": 1, "companies": 1}
    assert ("orcl@orcl-8k-2024-11-18", "orcl-8k-2024-11-18") in {
        (r["query_id"], r.get("filing")) for r in night["plan"]
    }
    with pytest.raises(VersionGone, match="filings table at version 7"):  # vacuumed, say: said, not the newest
        Corpus(LocalStore(corpus), {"filings": 7, "companies": 0}).catalog.versions()
