"""Retention that never breaks a night: `prism runs` lists runs, `prism runs prune` removes old
ones and the shared results no kept run holds, and a later night still reuses at $0 what a kept
run holds; an index entry or a last run that is gone is a miss that is ranked again and counted,
never an error. Commands as a user types them, the LLM over HTTP (the simulator)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prism.testing.simulator import SimulatorConfig
from tests.integration.test_catalog import files_of, run_files
from workers.testing import fleet_env, prism_cli

pytestmark = pytest.mark.integration

QUESTIONS = 3  # of the bundled sample's question set


@pytest.fixture()
def night(tmp_path, simulator):
    """A corpus of the bundled filings and a `--new` night over three of its questions."""
    simulator.config = SimulatorConfig(mode="lexical")
    results = tmp_path / "res"
    env = fleet_env(None, None, simulator.url, PRISM_RESULTS=str(results), PRISM_CHECK_SYSTEM_PROMPT="false")
    sample = prism_cli(["sample", "demo"], env, tmp_path)
    assert sample.returncode == 0, sample.stderr
    lines = (tmp_path / "demo" / "questions.jsonl").read_text().splitlines()[:QUESTIONS]
    (tmp_path / "q.jsonl").write_text("".join(line + "\n" for line in lines))
    ingest = prism_cli(["ingest", "demo/filings", "--corpus", "corpus"], env, tmp_path)
    assert ingest.returncode == 0, ingest.stderr

    def run(run_id: str, *extra: str) -> tuple[str, dict]:
        args = ["run", "--questions", "q.jsonl", "--corpus", "corpus", "--new", "--run-id", run_id, *extra]
        done = prism_cli(args, env, tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr, run_files(results, run_id)

    return run, env, results


def cli(env: dict, cwd: Path, *args: str):
    return prism_cli(list(args), env, cwd)


def shared_results(results: Path) -> set[str]:
    return {p.name.removesuffix(".json") for p in (results / "index" / "results").glob("*.json")}


def cited(evidence: list[dict]) -> list[tuple[str, ...]]:
    """Each question's cited chunks, in order."""
    return [(r["question_id"], r["rank"], r["filing_id"], r["chunk_id"]) for r in evidence]


def pair_jobs(results: Path, run_id: str) -> set[str]:
    """The job ids of the (question, filing) pairs a run ranked itself."""
    folder = results / "runs" / run_id / "results" / "chunks"
    return {json.loads(p.read_text())["job_id"] for p in folder.glob("*.json")}


def test_a_prune_keeps_what_the_next_night_reuses_at_no_cost(night, tmp_path, simulator):
    run, env, results = night
    for run_id in ("night-1", "night-2", "night-3"):
        run(run_id)
    listed = cli(env, tmp_path, "runs")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["night-3", "night-2", "night-1"] and {r[1] for r in rows} == {"complete"}
    assert all(r[-2] == str(QUESTIONS) for r in rows)

    before = files_of(results)
    dry = cli(env, tmp_path, "runs", "prune", "--keep", "1", "--dry-run")
    assert dry.returncode == 0 and [line.split("\t")[:2] for line in dry.stdout.splitlines()] == [
        ["would remove", "night-2"],
        ["would remove", "night-1"],
    ]
    assert files_of(results) == before  # a dry run removes nothing

    held = set((results / "runs" / "night-3" / "jobs.txt").read_text().split())
    pruned = cli(env, tmp_path, "runs", "prune", "--keep", "1")
    assert pruned.returncode == 0, pruned.stderr
    assert "removed 2 run(s)" in pruned.stderr and "night-3 (the newest complete run over corpus)" in pruned.stderr
    assert sorted(p.name for p in (results / "runs").iterdir()) == ["night-3"]
    assert held and held <= shared_results(results)  # what the kept run holds stays

    served = simulator.stats["ok"]
    said, fourth = run("night-4")
    assert f"{QUESTIONS} unchanged (their results reused at $0)" in said, said
    assert fourth["cost"]["total"]["calls"] == 0 and simulator.stats["ok"] == served  # no LLM request
    assert fourth["manifest"]["counts"]["lost_results"] == 0 and fourth["evidence"]


def test_results_gone_from_the_index_are_repaired_or_ranked_again_and_counted(night, tmp_path, simulator):
    run, env, results = night
    _, first = run("night-1")
    held = pair_jobs(results, "night-1")
    assert len(held) >= QUESTIONS and held <= shared_results(results)
    shutil.rmtree(results / "index" / "results")  # as a lifecycle rule on index/ would

    # The run that ranked them still holds them: copied back, nothing ranked again.
    served = simulator.stats["ok"]
    _, second = run("night-2")
    assert second["cost"]["total"]["calls"] == 0 and simulator.stats["ok"] == served
    assert second["manifest"]["counts"]["lost_results"] == 0 and shared_results(results) == held

    # Gone everywhere: a miss, ranked again, counted and said, and the shared copy is back.
    shutil.rmtree(results / "index" / "results")
    shutil.rmtree(results / "runs" / "night-1" / "results")
    said, third = run("night-3")
    assert third["manifest"]["status"] == "complete"
    assert third["manifest"]["counts"]["lost_results"] == QUESTIONS, third["manifest"]["counts"]
    assert f"{QUESTIONS} ranked again because an earlier result was gone" in said, said
    assert third["cost"]["total"]["calls"] > 0 and cited(third["evidence"]) == cited(first["evidence"])
    assert held <= shared_results(results)

    # An earlier release's index entry whose target is gone: a miss, removed, counted on the pair.
    job = sorted(held)[0]
    (results / "index" / "results" / f"{job}.json").unlink()
    legacy = results / "index" / "jobs" / job
    legacy.parent.mkdir(parents=True)
    legacy.write_text("runs/pruned-long-ago/results/chunks/x.json")
    plain = ["run", "--questions", "q.jsonl", "--corpus", "corpus", "--run-id", "night-4"]
    done = prism_cli(plain, env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    fourth = run_files(results, "night-4")
    assert fourth["manifest"]["counts"]["lost_results"] == 1 and not legacy.exists()
    assert held <= shared_results(results) and cited(fourth["evidence"]) == cited(first["evidence"])


def test_a_new_night_whose_last_run_is_gone_starts_from_the_newest_left(night, tmp_path):
    run, env, results = night
    run("night-1")
    run("night-2")
    shutil.rmtree(results / "runs" / "night-2")  # removed by hand
    said, third = run("night-3")
    assert "the last complete run over corpus, night-2, is gone; starting from run night-1" in said, said
    assert third["manifest"]["since"] == "night-1" and third["manifest"]["counts"]["reused"] == QUESTIONS

    shutil.rmtree(results / "runs" / "night-1")
    shutil.rmtree(results / "runs" / "night-3")
    said, fourth = run("night-4")
    assert "night-3, is gone and no earlier complete run is left in" in said and "every question is planned" in said, (
        said
    )
    assert fourth["manifest"]["since"] is None and fourth["manifest"]["status"] == "complete"


def test_a_bad_prune_is_one_line_and_removes_nothing(night, tmp_path):
    run, env, results = night
    run("night-1")
    run("night-2")
    before = files_of(results)
    for args, says in (
        (["nosuch"], "no run 'nosuch' to prune"),
        (["--keep", "0"], "--keep 0: keep at least 1 run"),
        (["--older-than", "-1"], "--older-than -1: give a number of days"),
        (["night-2"], "run night-2 is the newest complete run over corpus"),
        ([], "say what to prune"),
    ):
        refused = cli(env, tmp_path, "runs", "prune", *args)
        assert refused.returncode == 2 and refused.stdout == "", (args, refused.stdout)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr  # one line, no traceback
        assert says in refused.stderr, (args, refused.stderr)
        assert files_of(results) == before

    manifest = json.loads((results / "runs" / "night-1" / "manifest.json").read_text())
    busy = manifest | {"run_id": "busy", "status": "running", "owner": "another-host:1", "finished_at": None}
    (results / "runs" / "busy").mkdir()
    (results / "runs" / "busy" / "manifest.json").write_text(json.dumps(busy))
    before = files_of(results)
    refused = cli(env, tmp_path, "runs", "prune", "--keep", "1")
    assert refused.returncode == 2 and "run busy is in progress" in refused.stderr, refused.stderr
    assert files_of(results) == before
