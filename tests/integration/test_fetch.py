"""`prism fetch` against an imitation of EDGAR (prism/testing/edgar.py) serving copies of the
real filings in EDGAR's layout: SEC's fair-access rate held across four workers, a 403 storm
waited out, a killed fetch resumed without asking twice for a filing it wrote, the failures
named (a missing User-Agent, a 404, an HTML page in place of a filing), and two nights."""

import json
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

from prism.testing.edgar import Imitation, write_layout
from prism.testing.feed import bases_in, copies
from tests.conftest import SHARED
from workers.catalog import Catalog
from workers.store import LocalStore
from workers.testing import fleet_env, prism_cli

NIGHT1, NIGHT2 = date(2024, 3, 4), date(2024, 3, 5)
AGENT = "Acme Data ops@acme.com"


def _bases():
    return [b for b in bases_in(SHARED / "edgar" / "filings", SHARED / "edgar-nc") if len(b.documents) < 300_000]


@pytest.fixture()
def edgar(tmp_path):
    """EDGAR with 40 filings on the first night (every fourth a 10-K), served."""
    root = tmp_path / "edgar"
    write_layout(root, copies(_bases(), 40, NIGHT1, ten_k_every=4, nc_every=0))
    with Imitation(root) as imitation:
        yield imitation


def _env(imitation: Imitation, redis_url: str | None = None, **extra: str) -> dict[str, str]:
    return fleet_env(redis_url, None, None, PRISM_EDGAR_URL=imitation.url, PRISM_SEC_USER_AGENT=AGENT, **extra)


def _fetched(target: Path) -> list[Path]:
    return sorted((target / "edgar" / "data").rglob("*.txt")) if target.exists() else []


def test_the_rate_holds_across_four_workers_and_a_second_fetch_asks_for_no_filing(
    tmp_path, edgar, redis_url, start_worker
):
    env = _env(edgar, redis_url)
    for _ in range(4):
        start_worker(env, 1)
    args = ["fetch", "--out", str(tmp_path / "out"), "--since", str(NIGHT1), "--until", str(NIGHT1)]
    started = time.monotonic()
    done = prism_cli(args, env, tmp_path, timeout=300)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert len(_fetched(tmp_path / "out")) == 40 and "40 fetched" in done.stderr
    assert edgar.max_per_second() <= 10 and edgar.refused() == 0, (edgar.max_per_second(), edgar.refused())
    assert wall >= 40 / 10 - 1  # 41 requests at 10 a second, not faster
    before = len(edgar.log)
    again = prism_cli(args, env, tmp_path, timeout=300)
    assert again.returncode == 0 and "0 fetched" in again.stderr and "40 already there" in again.stderr
    assert [s.path for s in edgar.log[before:] if "/data/" in s.path] == []  # only the index again


def test_a_403_storm_pauses_the_fetch_and_loses_nothing(tmp_path, edgar):
    edgar.storm, edgar.storm_at = 25, 6  # 25 requests refused with SEC's threshold page, from the 6th on
    env = _env(edgar, PRISM_EDGAR_PAUSE_S="1")
    args = ["fetch", "--out", str(tmp_path / "out"), "--since", str(NIGHT1), "--until", str(NIGHT1)]
    done = prism_cli(args, env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert edgar.refused() == 25 and len(_fetched(tmp_path / "out")) == 40
    assert "EDGAR refused for the rate (403 from" in done.stderr, done.stderr  # said while it waits
    assert "40 fetched" in done.stderr and "0 failed" in done.stderr


def test_a_killed_fetch_resumes_without_asking_twice_for_a_filing_it_wrote(tmp_path, edgar, redis_url, start_worker):
    env = _env(edgar, redis_url, PRISM_EDGAR_RPS="4", PRISM_VISIBILITY_TIMEOUT_S="5")
    out = tmp_path / "out"
    victim = start_worker(env, 1)
    cmd = [
        str(Path(sys.executable).parent / "prism"),
        "fetch",
        "--out",
        str(out),
        "--since",
        str(NIGHT1),
        "--until",
        str(NIGHT1),
    ]
    producer = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(_fetched(out)) < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    victim.stop(signal.SIGKILL)
    producer.kill()
    producer.communicate()
    written = {f"/Archives/edgar/data/{p.parent.name}/{p.name}" for p in _fetched(out)}
    assert 10 <= len(written) < 40
    start_worker(env, 2)
    done = prism_cli(cmd[1:], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(_fetched(out)) == 40
    asked = edgar.requests()
    assert all(asked.count(path) == 1 for path in written)  # none asked for again
    assert not list(out.rglob("*.txt.tmp*")) and all(p.stat().st_size > 1000 for p in _fetched(out))


def test_without_a_user_agent_the_fetch_stops_in_one_line_naming_it(tmp_path, edgar):
    env = _env(edgar)
    del env["PRISM_SEC_USER_AGENT"]
    done = prism_cli(["fetch", "--out", str(tmp_path / "out"), "--since", str(NIGHT1)], env, tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "PRISM_SEC_USER_AGENT" in done.stderr
    env["PRISM_SEC_USER_AGENT"] = "Acme Data"  # no e-mail
    done = prism_cli(["fetch", "--out", str(tmp_path / "out"), "--since", str(NIGHT1)], env, tmp_path)
    assert done.returncode == 2 and "PRISM_SEC_USER_AGENT" in done.stderr and "e-mail" in done.stderr
    assert edgar.log == []


def test_a_404_and_an_html_page_are_named_failures_and_the_next_night_retries_them(tmp_path, edgar):
    env = _env(edgar, PRISM_EDGAR_PAUSE_S="1")
    data = sorted((edgar.root / "Archives" / "edgar" / "data").rglob("*.txt"))
    gone, page = data[0], data[1]
    shutil.move(gone, tmp_path / "aside.txt")
    page_path = "/" + page.relative_to(edgar.root).as_posix()
    edgar.error_pages.add(page_path)
    args = ["fetch", "--out", str(tmp_path / "out"), "--since", str(NIGHT1), "--until", str(NIGHT1)]
    done = prism_cli(args, env, tmp_path, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "38 fetched" in done.stderr and "2 failed" in done.stderr
    assert f"{gone.name}: http://" in done.stderr and "404, not on EDGAR" in done.stderr
    assert "not an EDGAR submission (an HTML page: 'SEC.gov | Service Unavailable')" in done.stderr
    assert page.name not in {p.name for p in _fetched(tmp_path / "out")}  # never kept as a filing
    record = json.loads((tmp_path / "out" / ".prism-fetch" / "days" / f"{NIGHT1}.json").read_text())
    assert record["done"] is False and len(record["failed"]) == 2
    shutil.move(tmp_path / "aside.txt", gone)
    edgar.error_pages.clear()
    before = len(edgar.log)
    retried = prism_cli(
        ["fetch", "--out", str(tmp_path / "out"), "--since", "last", "--until", str(NIGHT1)], env, tmp_path
    )
    assert retried.returncode == 0, retried.stderr
    assert sorted(s.path for s in edgar.log[before:] if "/data/" in s.path) == sorted(
        ["/" + gone.relative_to(edgar.root).as_posix(), page_path]
    )


def test_since_last_takes_the_new_nights_filings_only(tmp_path, edgar):
    env = _env(edgar)
    out = tmp_path / "out"
    first = prism_cli(["fetch", "--out", str(out), "--since", "last"], env, tmp_path)
    assert first.returncode == 2 and "--since last: no fetch" in first.stderr  # nothing to go on yet
    night1 = ["fetch", "--out", str(out), "--since", str(NIGHT1), "--until", str(NIGHT1), "--forms", "10-K"]
    assert prism_cli(night1, env, tmp_path).returncode == 0
    assert len(_fetched(out)) == 10  # the 10-Ks alone
    write_layout(edgar.root, copies(_bases(), 8, NIGHT2, ten_k_every=4, nc_every=0, start=500))  # two 10-Ks
    before = len(edgar.log)
    corpus = tmp_path / "corpus"
    night2 = ["fetch", "--out", str(out), "--since", "last", "--until", str(NIGHT2), "--forms", "10-K"]
    done = prism_cli([*night2, "--ingest", "--corpus", str(corpus)], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    asked = [s.path for s in edgar.log[before:]]
    assert len([p for p in asked if "/data/" in p]) == 2 and all("daily-index" in p for p in asked if "/data/" not in p)
    filings = Catalog(LocalStore(corpus)).all_filings()
    assert len(filings) == 12 and {f.meta.form_type for f in filings.values()} == {"10-K"}
