import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prism.ingest.models import Filing
from producer.ingest import ingest_source
from tests.filings import edgar_html, encrypted, pdf
from workers.corpus import Corpus
from workers.inputs import input_key
from workers.store import LocalStore, S3Store, safe_name
from workers.testing import queued, s3_client

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "corpus-store")
    endpoint = request.getfixturevalue("s3_server")
    return S3Store(request.getfixturevalue("bucket"), "team/prism", s3_client(endpoint))


def filings_folder(root: Path) -> Path:
    folder = root / "filings"
    (folder / "2023").mkdir(parents=True)
    (folder / "acme_2023_10K.PDF").write_bytes(
        pdf(["ACME 10-K cover", None, "Revenue was $10 million."], image_pages=frozenset({1}))
    )
    (folder / "acme_2023_10K.meta.json").write_text(json.dumps({"company": "Acme", "period": "FY2023"}))
    (folder / "2023" / "beta-10k.htm").write_bytes(edgar_html(company="BETA CORP"))
    (folder / "2023" / "notes.txt").write_text("# Outlook\n\nWe expect growth.\n\n# Risks\n\nCompetition.")
    (folder / "2023" / "metadata.jsonl").write_text(
        json.dumps({"file": "notes.txt", "id": "Beta/notes: Q3 2023?", "company": "Beta", "form": "8-K"}) + "\n"
    )
    (folder / "locked.pdf").write_bytes(encrypted(pdf(["secret"]), "pw"))
    (folder / "scan.pdf").write_bytes(pdf([None], image_pages=frozenset({0})))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nnot really")
    (folder / "readme.md").write_text("not a filing")
    return folder


def test_ingest_a_folder_then_reingest_is_a_no_op_and_a_change_is_a_new_version(store, tmp_path):
    folder = filings_folder(tmp_path)
    corpus = Corpus(store)
    first = ingest_source(folder, store)
    assert (first.ingested, first.unchanged, first.new_versions, first.failed) == (3, 0, 0, 3)
    assert (first.pages, first.empty_pages) == (5, 1)  # the PDF's three, one each for the HTML and the text
    assert sorted(first.filings) == ["Beta/notes: Q3 2023?", "acme_2023_10K", "beta-10k"]
    reasons = {Path(f.split(": ")[0]).name: f for f in first.failures}
    assert "encrypted with a password" in reasons["locked.pdf"] and "image-only" in reasons["scan.pdf"]
    assert "not a readable PDF" in reasons["broken.pdf"]

    catalog = corpus.catalog
    assert sorted(catalog.all_filings()) == sorted(first.filings)
    assert {Path(s).name for s in catalog.failures()} == {"locked.pdf", "scan.pdf", "broken.pdf"}
    acme = corpus.get_filing("acme_2023_10K")
    assert acme.meta.company == "Acme" and acme.meta.fiscal_year == 2023 and acme.meta.form_type == "10-K"
    assert acme.meta.guessed == ["form_type"] and acme.chunks[1].flags == ["empty"]
    assert acme.chunks[2].id == "acme_2023_10K:p3" and "Revenue was $10 million." in acme.chunks[2].text
    notes = corpus.get_filing("Beta/notes: Q3 2023?")
    assert notes.meta.form_type == "8-K" and [c.heading for c in notes.chunks] == ["Outlook", "Risks"]
    # An id with odd characters gets a safe key: a readable part and a hash.
    assert Corpus.head_key(notes.id) == f"filings/{safe_name(notes.id)}/head.json"
    assert safe_name(notes.id).startswith("Beta_notes_Q3_2023-") and "/" not in safe_name(notes.id)
    beta = corpus.get_filing("beta-10k")
    assert "ITEM 1A. RISK FACTORS" in {c.heading for c in beta.chunks} and beta.meta.company == "BETA CORP"

    stored = {k: store.get(k) for k in store.keys("") if not k.startswith("catalog/")}
    again = ingest_source(folder, store)
    assert (again.ingested, again.unchanged, again.new_versions, again.failed) == (0, 3, 0, 3)
    assert again.filings == first.filings and (again.pages, again.empty_pages) == (5, 1)
    after = {k: store.get(k) for k in store.keys("") if not k.startswith("catalog/")}
    assert after == stored  # no filing, head or input written again

    (folder / "acme_2023_10K.PDF").write_bytes(pdf(["ACME 10-K cover", None, "Revenue was $12 million."]))
    (folder / "broken.pdf").write_bytes(pdf(["Fixed now."]))
    changed = ingest_source(folder, store)
    assert (changed.ingested, changed.unchanged, changed.new_versions, changed.failed) == (1, 2, 1, 2)
    head = corpus.head("acme_2023_10K")
    assert head is not None and [v.version for v in head.versions] == [first.filings["acme_2023_10K"], head.latest]
    assert "$12 million" in corpus.get_filing("acme_2023_10K").chunks[2].text
    assert "$10 million" in corpus.get_filing("acme_2023_10K", first.filings["acme_2023_10K"]).chunks[2].text
    filings = corpus.catalog.all_filings()
    assert len(filings["acme_2023_10K"].versions) == 2 and "broken" in filings
    assert {Path(s).name for s in corpus.catalog.failures()} == {"locked.pdf", "scan.pdf"}  # the fixed file's is gone


def test_two_files_that_would_share_an_id_fail_the_second(store, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "report.txt").write_text("first report")
    (tmp_path / "b" / "report.txt").write_text("second report")
    summary = ingest_source(tmp_path, store)
    assert (summary.ingested, summary.failed) == (1, 1)
    assert "filing id 'report' is taken by" in summary.failures[0] and "/b/report.txt" in summary.failures[0]
    assert "first report" in Corpus(store).get_filing("report").chunks[0].text


def test_ingest_from_a_store_prefix_and_rows_sharing_a_filing(store, tmp_path, s3_server, bucket):
    source = S3Store(bucket, "incoming", s3_client(s3_server))
    source.put("q3/gamma_2023Q3_10Q.pdf", pdf(["Gamma quarterly report", "Segment results"]))
    same = ["page one text", "page two text"]
    rows = [
        {"id": "q1", "question": "What is on page one?", "candidates": same},
        {"id": "q2", "question": "What is on page two?", "candidates": same},
        {"id": "q3", "question": "Other?", "candidates": ["other filing"]},
    ]
    source.put("rows/questions.JSONL", "\n".join(json.dumps(r) for r in rows).encode() + b"\n{oops\n")
    summary = ingest_source(source, store)
    assert (summary.sources, summary.ingested, summary.failed) == (2, 3, 1)
    assert summary.questions["q1"] == summary.questions["q2"] != summary.questions["q3"]
    assert summary.failures[0].startswith(f"{source.uri}/rows/questions.JSONL line 4: ")
    corpus = Corpus(store)
    gamma = corpus.get_filing("gamma_2023Q3_10Q")
    assert gamma.meta.source_uri == f"{source.uri}/q3/gamma_2023Q3_10Q.pdf"
    assert (gamma.meta.company, gamma.meta.form_type, gamma.meta.fiscal_year, gamma.meta.fiscal_quarter) == (
        "gamma",
        "10-Q",
        2023,
        3,
    )
    shared = corpus.get_filing(summary.questions["q1"])
    assert isinstance(shared, Filing) and [c.text for c in shared.chunks] == same
    again = ingest_source(source, store)
    assert (again.ingested, again.unchanged, again.failed) == (0, 3, 1)


def test_prism_ingest_stores_each_filing_once_and_names_what_it_could_not_read(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "acme_2023_10k.pdf").write_bytes(pdf(["Revenue was $12 million in 2023.", None, "Net income rose."]))
    (folder / "acme_2023_10k.meta.json").write_text(json.dumps({"company": "Acme", "form_type": "10-K"}))
    (folder / "acme_q3.HTML").write_bytes(edgar_html())
    (folder / "locked.pdf").write_bytes(encrypted(pdf(["secret"]), "pw"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRISM_")}
    cmd = [str(Path(sys.executable).parent / "prism"), "ingest", str(folder), "--corpus", str(tmp_path / "corpus")]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 3, first.stderr  # some files gave no filing
    assert "3 sources: 2 filings ingested" in first.stderr and "1 failed" in first.stderr
    assert "locked.pdf" in first.stderr and "Traceback" not in first.stderr
    catalog = Corpus(LocalStore(tmp_path / "corpus")).catalog
    assert len(catalog.all_filings()) == 2 and len(catalog.failures()) == 1
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert "0 filings ingested, 0 new versions, 2 unchanged" in again.stderr
    # the ids qrels name, with what each filing is, and the fields that were guessed
    listed = subprocess.run(
        [cmd[0], "corpus", "ls", "--corpus", str(tmp_path / "corpus")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = " ".join((listed.stdout + listed.stderr).split())
    assert listed.returncode == 0 and "2 filings in" in out and "1 sources gave no filing" in out, out
    assert "acme_2023_10k" in out and "acme_q3" in out and "ACME WIDGETS" in out and "10-K" in out


def test_prism_ingest_names_the_files_it_does_not_read_and_refuses_a_corpus_that_is_a_file(tmp_path):
    from workers.testing import fleet_env, prism_cli

    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "notes.txt").write_text("# Outlook\n\nWe expect growth.")
    for i in range(7):
        (folder / f"deck{i}.pptx").write_bytes(b"slides")
    done = prism_cli(
        ["ingest", str(folder), "--corpus", str(tmp_path / "corpus")], fleet_env(None, None, None), tmp_path
    )
    assert done.returncode == 0, done.stderr
    names = ", ".join(f"deck{i}.pptx" for i in range(5))
    assert "7 files not ingested (not .pdf, .htm, .html, .txt, .nc, .jsonl" in done.stderr
    assert f"{names} and 2 more\n" in " ".join(done.stderr.split()) + "\n"
    assert Corpus(LocalStore(tmp_path / "corpus")).catalog.all_filings().keys() == {"notes"}
    (tmp_path / "corpus.json").write_text("{}")
    refused = prism_cli(
        ["ingest", str(folder), "--corpus", str(tmp_path / "corpus.json")], fleet_env(None, None, None), tmp_path
    )
    assert refused.returncode == 2
    assert refused.stderr == f"error: --corpus {tmp_path / 'corpus.json'}: is a file; give a folder or an s3:// URI\n"


def test_fleet_ingest_runs_one_task_per_file_on_workers_and_stores_each_filing_input(
    tmp_path, redis_url, s3_server, bucket, start_worker
):
    from workers.testing import fleet_env, prism_cli

    client = s3_client(s3_server)
    sources = {
        "drop/acme_2023_10k.pdf": pdf(["Revenue was $12 million in 2023.", "Net income rose."]),
        "drop/acme_2023_10k.meta.json": json.dumps({"company": "Acme", "form_type": "10-K"}).encode(),
        "drop/beta_q3.htm": edgar_html(company="BETA CORP"),
        "drop/gamma.txt": b"# Outlook\n\nWe expect growth.\n\n# Risks\n\nCompetition.",
        "drop/broken.pdf": b"%PDF-1.7\nnot really",
    }
    for key, body in sources.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    env = fleet_env(redis_url, s3_server, None, PRISM_SEGMENT_TOKENS="2000")
    start_worker(env, 1)
    start_worker(env, 1)
    corpus_uri = f"s3://{bucket}/corpus-fleet"
    done = prism_cli(["ingest", f"s3://{bucket}/drop/", "--corpus", corpus_uri], env, tmp_path, timeout=300)
    assert done.returncode == 3, done.stderr  # one file gave no filing
    assert "4 sources: 3 filings ingested" in done.stderr and "1 failed" in done.stderr, done.stderr
    assert "broken.pdf" in done.stderr and "Traceback" not in done.stderr
    corpus = Corpus(S3Store(bucket, "corpus-fleet", client))
    filings = corpus.catalog.all_filings()
    assert sorted(filings) == ["acme_2023_10k", "beta_q3", "gamma"]
    assert [Path(s).name for s in corpus.catalog.failures()] == ["broken.pdf"]
    assert filings["acme_2023_10k"].meta.company == "Acme"
    # each filing's chunk input for the configured budget was made by the worker that ingested it
    for fid, entry in filings.items():
        key = input_key(fid, entry.latest, 2000, "o200k_base")
        assert corpus.store.exists(key), key
    logs = "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))
    assert logs.count("prism.ingest_file") >= 4  # the tasks ran on the workers, not in the producer


def test_fleet_ingest_with_no_worker_says_so_and_ends_when_one_starts(tmp_path, redis_url, s3_server, start_worker):
    import time

    import redis

    from workers.testing import fleet_env

    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "notes.txt").write_text("# Outlook\n\nWe expect growth.")
    env = fleet_env(redis_url, s3_server, None, PRISM_STALL_S="2")
    cmd = [str(Path(sys.executable).parent / "prism"), "ingest", str(folder), "--corpus", str(tmp_path / "corpus")]
    producer = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    broker = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 120
    while not queued(broker) and time.monotonic() < deadline:  # the producer starts, then sends
        time.sleep(0.2)
    time.sleep(4)  # twice PRISM_STALL_S with the task queued and no worker
    assert producer.poll() is None, producer.communicate()[1]
    assert queued(broker) == 1  # waiting: the task is queued, not lost
    start_worker(env, 1)
    _, err = producer.communicate(timeout=120)
    assert producer.returncode == 0, err
    assert "no ingest task has ended for 2 s (PRISM_STALL_S): are workers running" in err
    assert "1 sources: 1 filings ingested" in err


def test_a_reingest_sends_only_the_files_that_changed(tmp_path):
    """Unchanged files are skipped by their fingerprint before any task is sent; a touched file
    (same bytes, new time) is read and confirmed unchanged by its content, then skipped too."""
    from prism.ingest.models import Chunking
    from prism.segmenting import TokenCounter
    from workers.ingesting import ingest_file

    store, folder = LocalStore(tmp_path / "corpus"), tmp_path / "filings"
    folder.mkdir()
    for i in range(5):
        (folder / f"co{i}_2023_10K.txt").write_text(f"# Revenue\n\nCompany {i} revenue was {i} million.")
    (folder / "metadata.jsonl").write_text(json.dumps({"file": "co0_2023_10K.txt", "company": "Zero"}) + "\n")
    sent: list[list[str]] = []

    def dispatch(items):
        sent.append(sorted(Path(item.uri).name for item in items))
        for item in items:
            yield ingest_file(
                Corpus(store),
                item.name,
                item.uri,
                item.read(),
                item.record,
                Chunking(),
                TokenCounter(),
                None,
                None,
                item.fingerprint,
            )

    first = ingest_source(folder, store, dispatch=dispatch)
    assert len(sent[0]) == 5 and (first.ingested, first.skipped) == (5, 0)
    again = ingest_source(folder, store, dispatch=dispatch)
    assert sent[1] == [] and (again.unchanged, again.skipped, again.sources) == (5, 5, 5)
    assert again.filings == first.filings and again.pages == first.pages

    (folder / "co2_2023_10K.txt").write_text("# Revenue\n\nCompany 2 revenue was 7 million.")
    touched = folder / "co3_2023_10K.txt"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    (folder / "metadata.jsonl").write_text(json.dumps({"file": "co0_2023_10K.txt", "company": "Zero Corp"}) + "\n")
    changed = ingest_source(folder, store, dispatch=dispatch)
    assert sent[2] == ["co0_2023_10K.txt", "co2_2023_10K.txt", "co3_2023_10K.txt"]
    assert (changed.new_versions, changed.unchanged, changed.skipped) == (2, 3, 2)  # new metadata: a new version
    catalog = Corpus(store).catalog
    filings = catalog.all_filings()
    assert filings["co2_2023_10K"].latest == changed.filings["co2_2023_10K"] != first.filings["co2_2023_10K"]
    assert set(filings) == set(first.filings) and len(catalog.sources()) == 5
    assert ingest_source(folder, store, dispatch=dispatch).skipped == 5 and sent[3] == []
