"""`--compare previous`: each chosen filing is ranked beside the company's earlier one, and the
evidence table says what changed in each cited passage since then (a figure changed, a
paragraph new, one gone); a company with none says so and is no failure; and a `--new` night
reuses the earlier filing's ranking at $0, even when it is the earlier filing of a new one."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq

from tests.filings import annual_report
from workers.testing import fleet_env, prism_cli

STEADY = (
    "Our business depends on the continued demand for widgets from industrial customers across North America "
    "and Europe, and on our ability to source steel at stable prices."
)
ACME = {
    2023: [
        STEADY,
        "Widget revenue was $40,609 million for the year, driven by strong orders from industrial customers.",
        "Gadget revenue fell to $2,100 million as we wound down the gadget line over the year.",
    ],
    2024: [
        STEADY,
        "Widget revenue was $41,002 million for the year, driven by strong orders from industrial customers.",
        "We opened a new plant in Ohio that makes widgets for the automotive market and employs 400 people.",
    ],
}
QUESTIONS = [
    {"id": "acme-rev", "question": "What was Acme's widget revenue?", "scope": {"company": "Acme"}},
    {"id": "globex-rev", "question": "What was Globex revenue?", "scope": {"company": "Globex"}},
    {"id": "acme-plain", "question": "Where is Acme's new plant?", "scope": {"company": "Acme"}, "compare": "none"},
]


def filings(folder: Path) -> Path:
    """Acme's 10-Ks of FY2023 and FY2024 and Globex's one, of FY2024."""
    folder.mkdir()
    for year, paragraphs in ACME.items():
        annual_report(folder, f"acme-10k-{year}", "Acme Corp", year, paragraphs, cik="1234")
    globex = ["Globex revenue was $9,000 million for the year, from widget sales to industrial customers."]
    annual_report(folder, "globex-10k-2024", "Globex Inc", 2024, globex)
    return folder


def read_run(results: Path, run_id: str) -> dict:
    folder = results / "runs" / run_id
    return {
        "evidence": list(csv.DictReader(io.StringIO((folder / "evidence.csv").read_text()))),
        "plan": [json.loads(line) for line in (folder / "plan.jsonl").read_text().splitlines()],
        "cost": json.loads((folder / "cost.json").read_text()),
        "manifest": json.loads((folder / "manifest.json").read_text()),
        "report": (folder / "report.md").read_text(),
        "folder": folder,
    }


def test_the_evidence_says_what_changed_since_the_previous_filing(tmp_path):
    env = fleet_env(None, None, None, PRISM_RESULTS=str(tmp_path / "res"))
    corpus = str(tmp_path / "corpus")
    assert prism_cli(["ingest", str(filings(tmp_path / "filings")), "--corpus", corpus], env, tmp_path).returncode == 0
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    args = ["run", "--questions", "q.jsonl", "--corpus", corpus, "--run-id", "r1", "--compare", "previous"]
    done = prism_cli(args, env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr  # Globex's having no earlier filing is no failure
    run = read_run(tmp_path / "res", "r1")
    pairs = {row["query_id"]: row for row in run["plan"] if row["task"] == "chunks"}
    # the earlier filing is ranked as a pair of its own, named as the earlier one of the chosen filing
    assert pairs["acme-rev@acme-10k-2024"]["previous"] == "acme-10k-2023"
    assert pairs["acme-rev@acme-10k-2023"]["previous_of"] == "acme-10k-2024"
    assert pairs["globex-rev@globex-10k-2024"]["previous"] is None
    assert "acme-plain@acme-10k-2023" not in pairs  # its line asks for no comparison
    rows: dict[str, list[dict]] = {}
    for row in run["evidence"]:
        rows.setdefault(row["question_id"], []).append(row)
    acme = rows["acme-rev"]
    assert {r["filing_id"] for r in acme if r["rank"]} == {"acme-10k-2024"}  # the earlier filing is no evidence
    figure = next(r for r in acme if "$41,002" in r["excerpt"])
    assert figure["change"] == "modified" and figure["previous_filing"] == "acme-10k-2023"
    assert "Widget revenue was [-$40,609-]{+$41,002+} million for the year" in figure["redline"]
    assert "{+We opened a new plant in Ohio" in figure["redline"] and figure["previous_page"] == "1"
    assert 0 < float(figure["similarity"]) < 1
    (gone,) = [r for r in acme if r["change"] == "removed"]  # cited last year, no counterpart now
    assert gone["rank"] == "" and gone["filing_id"] == "" and gone["page"] == ""
    assert gone["previous_filing"] == "acme-10k-2023" and gone["previous_page"] == "1"
    assert (
        gone["redline"] == "[-Gadget revenue fell to $2,100 million as we wound down the gadget line over the year.-]"
    )
    assert {r["change"] for r in rows["globex-rev"]} == {"no previous filing"}
    assert all(r["change"] == "" and r["redline"] == "" for r in rows["acme-plain"])
    parquet = pq.read_table(run["folder"] / "evidence.parquet").to_pylist()
    assert [(r["question_id"], r["change"], r["previous_page"]) for r in parquet] == [
        (r["question_id"], r["change"], int(r["previous_page"]) if r["previous_page"] else None)
        for r in run["evidence"]
    ]
    assert "## Changed since the previous filing" in run["report"]
    assert "| Acme Corp | 2 | 1 | 0 |" in run["report"] and "| globex-rev | 0 | 0 | 2 |" in run["report"]
    metrics = json.loads((run["folder"] / "evidence_metrics.json").read_text())
    assert metrics["questions"] == 3 and metrics["no_filing_in_scope"] == 0


def test_new_nights_reuse_the_previous_filings_ranking_at_0(tmp_path, simulator):
    from prism.testing.simulator import SimulatorConfig

    simulator.config = SimulatorConfig(mode="lexical")
    results = tmp_path / "res"
    env = fleet_env(None, None, simulator.url, PRISM_RESULTS=str(results), PRISM_CHUNK_RANKER="llm")
    folder, corpus = filings(tmp_path / "filings"), str(tmp_path / "corpus")
    ingest = ["ingest", str(folder), "--corpus", corpus]
    assert prism_cli(ingest, env, tmp_path).returncode == 0
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS[:2]))
    night = ["run", "--questions", "q.jsonl", "--corpus", corpus, "--new", "--compare", "previous", "--filings", "1"]
    assert prism_cli([*night, "--run-id", "night-1"], env, tmp_path, timeout=300).returncode == 0
    first = read_run(results, "night-1")
    ranked = {j["query_id"] for j in first["cost"]["jobs"] if j["calls"]}
    assert "acme-rev@acme-10k-2023" in ranked  # the earlier filing was ranked by the LLM
    served = simulator.stats["ok"]

    # Nothing changed: the second night makes no call.
    assert prism_cli([*night, "--run-id", "night-2"], env, tmp_path, timeout=300).returncode == 0
    second = read_run(results, "night-2")
    assert simulator.stats["ok"] == served and second["cost"]["total"]["calls"] == 0
    assert [r for r in second["evidence"] if r["change"]] == [r for r in first["evidence"] if r["change"]]

    # Acme files its FY2025 report: it is ranked, and FY2024 (now its earlier filing) is not again.
    fy2025 = [STEADY, ACME[2024][1].replace("$41,002", "$43,500")]
    annual_report(folder, "acme-10k-2025", "Acme Corp", 2025, fy2025, cik="1234")
    assert prism_cli(ingest, env, tmp_path).returncode == 0
    assert prism_cli([*night, "--run-id", "night-3"], env, tmp_path, timeout=300).returncode == 0
    third = read_run(results, "night-3")
    asked = [r["user"] for r in list(simulator.requests)[-(simulator.stats["ok"] - served) :]]
    assert asked and all("43,500" in text for text in asked)  # only the new filing went to the LLM
    pairs = {row["query_id"]: row for row in third["plan"] if row["task"] == "chunks"}
    assert pairs["acme-rev@acme-10k-2025"]["previous"] == "acme-10k-2024"
    earlier = pairs["acme-rev@acme-10k-2024"]
    assert (earlier["previous_of"], earlier["state"], earlier["since"]) == ("acme-10k-2025", "reused", "night-1")
    best = next(r for r in third["evidence"] if r["question_id"] == "acme-rev" and "$43,500" in r["excerpt"])
    assert best["previous_filing"] == "acme-10k-2024" and "[-$41,002-]{+$43,500+}" in best["redline"]


def nvidia_risks() -> list[str]:
    """Seven paragraphs of NVIDIA's risk factors, word for word from its 10-Q for the quarter
    ended July 27, 2025 (the bundled copy): acquisitions, export controls, the war in Ukraine."""
    from prism.changes.paragraphs import paragraphs, section_key
    from prism.ingest.filings import parse_filing

    source = Path(__file__).parents[2] / "prism" / "data" / "edgar" / "filings" / "nvda-10q-2025-08-27.html"
    found = paragraphs(parse_filing(source.read_bytes(), str(source), {}).chunks)
    risks = [p.text for p in found if section_key(p.heading) == "risk factors" and "\n" not in p.text]
    return [text for text in risks if 40 <= len(text.split()) <= 120][1:8]


def test_a_paragraph_still_in_the_filing_is_not_removed_when_the_cited_chunks_edges_move(tmp_path):
    risks, folder = nvidia_risks(), tmp_path / "filings"
    folder.mkdir()
    # A year later one paragraph is deleted; every chunk after it takes its next paragraph, so
    # what last year's evidence cited now lies across other chunks' edges (chunks of 200 tokens:
    # [1] [2, 3] [4, 5] [6, 7] before, [1] [2, 4] [5, 6] [7] now).
    deleted = risks[2]
    annual_report(folder, "nvda-10k-2024", "NVIDIA Corp", 2024, risks, cik="1045810")
    annual_report(folder, "nvda-10k-2025", "NVIDIA Corp", 2025, [r for r in risks if r != deleted], cik="1045810")
    env = fleet_env(None, None, None, PRISM_RESULTS=str(tmp_path / "res"), PRISM_CHUNK_TOKENS="200", PRISM_TOP_N="1")
    corpus = str(tmp_path / "corpus")
    assert prism_cli(["ingest", str(folder), "--corpus", corpus], env, tmp_path).returncode == 0
    asked = [
        ("sanctions", "What sanctions did the United States impose in response to the war in Ukraine?"),
        ("acquisitions", "What additional risks do acquisitions and strategic investments bring?"),
    ]
    lines = [{"id": qid, "question": text, "scope": {"company": "NVIDIA"}} for qid, text in asked]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in lines))
    args = ["run", "--questions", "q.jsonl", "--corpus", corpus, "--run-id", "r1", "--compare", "previous"]
    done = prism_cli([*args, "--filings", "1"], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    run = read_run(tmp_path / "res", "r1")
    removed = [r for r in run["evidence"] if r["change"] == "removed"]
    # only the deleted paragraph is gone; those the chunks' edges moved are in the filing still
    assert [(r["question_id"], r["redline"]) for r in removed] == [("acquisitions", f"[-{deleted}-]")]
    assert all(r["change"] == "unchanged" for r in run["evidence"] if r["rank"])
    ranked = sum(1 for r in run["evidence"] if r["rank"])
    assert f"| NVIDIA Corp | {ranked} | 1 |" in run["report"]  # the report counts the rows the table has
