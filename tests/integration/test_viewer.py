"""The run viewer in a real browser (Debian's chromium, driven by Playwright; no browser is
downloaded): a run over the shared EDGAR filings and their 37 questions, plus a filing and a
question crafted with markup in their text, exported with `prism view --out` and opened from
file://. The DOM is checked: every question listed and reachable, rows in rank order, each
passage marked inside its page's text, EDGAR links, filters, keys, escaping; and the server
serves nothing outside the run. Screenshots are kept in .artifacts/viewer/."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from producer.ingest import ingest_source
from tests.conftest import ROOT, SHARED
from workers.corpus import Corpus
from workers.store import LocalStore
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / ".artifacts" / "viewer"
HOSTILE = """<html><body><p>ACME HOSTILE INC</p><p>FORM 8-K</p>
<p>Revenue &lt;script&gt;document.title='pwned'&lt;/script&gt; grew 12 percent in fiscal 2024.</p>
<p>The board &lt;img src=x onerror="document.body.setAttribute('data-pwned','1')"&gt; approved the dividend.</p>
<p>&lt;title&gt;owned&lt;/title&gt; Net revenue was 40 million dollars.</p></body></html>"""
MARKUP_QUESTION = "What was <b>revenue</b> growth? <script>document.title='q'</script>"


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    """The run, a second run with another chunk ranker (to compare against), and the export."""
    work = tmp_path_factory.mktemp("viewer")
    filings = work / "filings"
    shutil.copytree(SHARED / "edgar" / "filings", filings)
    (filings / "acme-hostile-8k-2024.html").write_text(HOSTILE)
    (filings / "acme-hostile-8k-2024.meta.json").write_text(
        json.dumps(
            {"company": "Acme Hostile Inc", "form_type": "8-K", "cik": "123", "accession": "0000000123-24-000001"}
        )
    )
    ingest_source(filings, LocalStore(work / "corpus"))
    keys = ("id", "question", "scope", "qrels", "answer")
    rows = [
        json.loads(line) for line in (SHARED / "edgar" / "questions.jsonl").read_text().splitlines() if line.strip()
    ]
    rows = [{k: r[k] for k in keys if k in r} for r in rows]
    rows.append({"id": "acme <i>1</i>/x y", "question": MARKUP_QUESTION, "scope": {"company": "Acme Hostile"}})
    rows.append({"id": "nobody", "question": "What was revenue?", "scope": {"company": "Initech"}})
    (work / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = fleet_env(None, None, None)
    base = ["run", "--questions", "questions.jsonl", "--corpus", str(work / "corpus")]
    for run_id, ranker in (("before", "lexical"), ("night", "financial")):
        done = prism_cli([*base, "--run-id", run_id, "--chunk-ranker", ranker], env, work)
        assert done.returncode == 3, done.stderr[-2000:]  # "nobody" has no filing in scope
    done = prism_cli(["view", "night", "--against", "before", "--out", str(work / "site")], env, work)
    assert done.returncode == 0, done.stderr[-2000:]
    return {"work": work, "site": work / "site", "questions": rows, "env": env}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is needed for the viewer's tests: apt-get install chromium"
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        launched.close()


def _page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("dialog", lambda dialog: pytest.fail(f"a script from a text ran: {dialog.message}"))
    return page


def _listed(page) -> list[str]:
    """Every question id the run page lists, page after page of the list."""
    ids: list[str] = []
    while True:
        ids += page.eval_on_selector_all("#questions li", "items => items.map(i => i.dataset.id)")
        following = page.locator(".pager button", has_text="next")
        if following.count() == 0 or following.is_disabled():
            return ids
        following.click()


def test_every_question_is_listed_and_its_page_holds_its_rows_with_each_passage_marked(viewer, browser):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = _page(browser)
    page.goto((viewer["site"] / "index.html").as_uri())
    page.wait_for_selector("#questions li")
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)
    assert sorted(_listed(page)) == sorted(q["id"] for q in viewer["questions"])
    page.goto((viewer["site"] / "index.html").as_uri())
    hrefs = page.eval_on_selector_all("#questions li a", "links => links.map(a => a.getAttribute('href'))")
    for q in viewer["questions"]:
        assert any(f"id={quote(q['id'], safe='')}" in h for h in hrefs), q["id"]
    corpus = Corpus(LocalStore(viewer["work"] / "corpus")).catalog.all_filings()
    linked = {fid for fid, e in corpus.items() if e.meta.cik and e.meta.accession}
    checked = 0
    for href in hrefs:
        page.goto((viewer["site"] / href.split("?")[0]).as_uri() + "?" + href.split("?", 1)[1])
        page.wait_for_selector("section h2")
        rows = page.eval_on_selector_all(
            "li.row",
            """rows => rows.map(r => ({rank: +r.dataset.rank, filing: r.querySelector('.filing').textContent,
                mark: r.querySelector('pre.page mark') ? r.querySelector('pre.page mark').textContent : null,
                inPage: !!r.querySelector('pre.page > mark'), page: r.querySelector('pre.page').textContent,
                edgar: r.querySelector('a.edgar') ? r.querySelector('a.edgar').href : null}))""",
        )
        assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
        for r in rows:
            assert r["mark"] and r["inPage"] and r["mark"] in r["page"], (href, r["filing"])
            assert (r["edgar"] is not None) == (r["filing"] in linked), (href, r["filing"])
            if r["edgar"]:
                assert re.match(
                    r"https://www\.sec\.gov/Archives/edgar/data/\d+/\d{18}/\d{10}-\d{2}-\d{6}-index\.htm$", r["edgar"]
                )
        checked += len(rows)
    assert checked >= 150
    page.goto((viewer["site"] / "question.html").as_uri() + "?n=0&id=" + quote(viewer["questions"][0]["id"]))
    page.wait_for_selector("mark")
    page.screenshot(path=str(ARTIFACTS / "question.png"))


def test_filters_search_and_keys(viewer, browser):
    page = _page(browser)
    page.goto((viewer["site"] / "index.html").as_uri())
    page.wait_for_selector("#questions li.selected")
    total = len(viewer["questions"])
    assert page.inner_text(".count") == f"{total} of {total} questions"
    page.keyboard.press("j")
    assert page.eval_on_selector("#questions li.selected", "li => li.dataset.id") == viewer["questions"][1]["id"]
    page.select_option("#only-company", "NVIDIA CORP")
    nvidia = [q for q in viewer["questions"] if q.get("scope", {}).get("company") == "NVIDIA"]
    assert page.inner_text(".count") == f"{len(nvidia)} of {total} questions"
    page.select_option("#only-company", "")
    page.check("#only-no_filing")
    assert page.eval_on_selector_all("#questions li", "items => items.map(i => i.dataset.id)") == ["nobody"]
    page.uncheck("#only-no_filing")
    page.check("#only-changed")  # against the lexical run, the financial retriever changes many top fives
    changed = page.eval_on_selector_all("#questions li", "items => items.length")
    assert 0 < changed < total
    page.uncheck("#only-changed")
    page.fill("#search", "Sophiris")
    assert page.inner_text(".count").startswith("3 of")
    page.fill("#search", "")
    page.keyboard.press("Escape")  # out of the search box: the keys move the list again
    first = page.locator("#questions li").first.get_attribute("data-id")
    page.keyboard.press("Enter")  # the selected question opens
    page.wait_for_selector("li.row.selected")
    assert page.eval_on_selector("li.row.selected", "r => r.dataset.rank") == "1"
    page.keyboard.press("j")
    assert page.eval_on_selector("li.row.selected", "r => r.dataset.rank") == "2"
    page.keyboard.press("n")
    page.wait_for_url(re.compile(r"question\.html\?n=1&"))
    assert first == viewer["questions"][0]["id"]


def test_markup_in_a_filing_or_a_question_is_shown_as_text(viewer, browser):
    page = _page(browser)
    page.goto((viewer["site"] / "index.html").as_uri())
    page.wait_for_selector("#questions li")
    page.fill("#search", "revenue</b> growth")
    href = page.locator("#questions li a").first.get_attribute("href")
    page.goto((viewer["site"] / "question.html").as_uri() + "?" + href.split("?", 1)[1])
    page.wait_for_selector("li.row")
    assert page.title() == MARKUP_QUESTION  # the question's text, the filing's "<title>" set nothing
    assert page.inner_text("p.question") == MARKUP_QUESTION
    assert page.locator("p.question b, main script, img[src='x']").count() == 0
    assert page.get_attribute("body", "data-pwned") is None
    shown = page.inner_text("#rows")
    assert (
        "<script>document.title='pwned'</script>" in shown and "onerror=" in shown and "<title>owned</title>" in shown
    )
    page.screenshot(path=str(ARTIFACTS / "markup.png"))


def test_the_server_serves_the_run_and_nothing_outside_it(viewer):
    args = [str(Path(sys.executable).parent / "prism"), "view", "night", "--port", "0"]
    server = subprocess.Popen(args, cwd=viewer["work"], env=viewer["env"], stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving the viewer at" not in line:
            line = server.stderr.readline()
            assert line, "the server said nothing"
        address = re.search(r"(http://[\d.]+:\d+/)", line).group(1)
        assert address.startswith("http://127.0.0.1:")
        assert b"prism run" in urllib.request.urlopen(address).read()
        assert b"PRISM.run" in urllib.request.urlopen(address + "data/run.js").read()
        for path in (
            "../../etc/passwd",
            "..%2F..%2Fetc%2Fpasswd",
            "data%2F..%2F..%2Fmanifest.json",
            "%2e%2e/%2e%2e/etc/hosts",
            "runs/night/manifest.json",
        ):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(address + path)
            assert refused.value.code == 404, path
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """A run with `--compare previous` over Acme's two annual reports (a figure changed, a
    paragraph new holding a script tag, one gone holding an image tag) and Globex's one, exported."""
    from tests.filings import annual_report

    work = tmp_path_factory.mktemp("compared")
    folder = work / "filings"
    folder.mkdir()
    steady = "Our business depends on demand for widgets from industrial customers in North America and Europe."
    revenue = "Widget revenue was $40,609 million for the year, driven by strong orders from industrial customers."
    gone = "Gadget sales &lt;img src=x onerror=\"document.body.setAttribute('data-pwned','1')\"&gt; ended this year."
    new = "A new plant &lt;script&gt;document.title='pwned'&lt;/script&gt; in Ohio makes widgets for carmakers."
    annual_report(folder, "acme-10k-2023", "Acme Corp", 2023, [steady, revenue, gone], cik="1234")
    annual_report(
        folder, "acme-10k-2024", "Acme Corp", 2024, [steady, revenue.replace("40,609", "41,002"), new], "1234"
    )
    annual_report(folder, "globex-10k-2024", "Globex Inc", 2024, ["Globex revenue was $9,000 million for the year."])
    ingest_source(folder, LocalStore(work / "corpus"))
    rows = [
        {"id": "acme-rev", "question": "What was Acme's widget revenue?", "scope": {"company": "Acme"}},
        {"id": "globex-rev", "question": "What was Globex revenue?", "scope": {"company": "Globex"}},
    ]
    (work / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = fleet_env(None, None, None)
    run = ["run", "--questions", "questions.jsonl", "--corpus", str(work / "corpus"), "--run-id", "cmp"]
    done = prism_cli([*run, "--compare", "previous"], env, work)
    assert done.returncode == 0, done.stderr[-2000:]
    done = prism_cli(["view", "cmp", "--out", str(work / "site")], env, work)
    assert done.returncode == 0, done.stderr[-2000:]
    return work / "site"


def test_a_redline_shows_its_marks_as_del_and_ins_and_every_text_as_text(compared, browser):
    page = _page(browser)
    page.goto((compared / "index.html").as_uri())
    page.wait_for_selector("#questions li")
    assert page.inner_text("#changed-by-company") == (
        "changed since the previous filing: Acme Corp 1 of 1 \u00b7 Globex Inc 0 of 1"
    )
    page.check("#only-changed_previous")
    assert page.eval_on_selector_all("#questions li", "items => items.map(i => i.dataset.id)") == ["acme-rev"]
    page.locator("#questions li a").first.click()
    page.wait_for_selector(".redline")
    marks = page.evaluate(
        """() => ({del: [...document.querySelectorAll('.redline del')].map(d => d.textContent),
                   ins: [...document.querySelectorAll('.redline ins')].map(i => i.textContent)})"""
    )
    assert "$40,609" in marks["del"] and "$41,002" in marks["ins"]
    assert any("<script>document.title='pwned'</script>" in text for text in marks["ins"])
    assert any("onerror=" in text for text in marks["del"])  # the passage gone, in its removed row
    assert page.title() == "What was Acme's widget revenue?"
    assert page.locator(".redline script, .redline img, main img[src='x']").count() == 0
    assert page.get_attribute("body", "data-pwned") is None
    link = page.locator("summary.previous-link").first
    assert link.inner_text() == "the previous filing's page 1 (acme-10k-2023)"
    link.click()  # the earlier filing's page opens beside the row
    assert "$40,609 million" in page.locator("details.previous[open] pre.page").first.inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "redline.png"), full_page=True)
