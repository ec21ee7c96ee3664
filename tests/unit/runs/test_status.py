"""How what a run stored settles its status, counts and end (prism/runs/lifecycle.py): pure, no store."""

from datetime import UTC, datetime, timedelta

from prism.models import Failure, JobResult, Ranking, RunConfig, RunManifest
from prism.runs.lifecycle import MOVES, settle
from prism.runs.outcomes import RunOutcomes

STARTED = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def _manifest(status: str = "running", **update) -> RunManifest:
    manifest = RunManifest(
        run_id="r1",
        status=status,  # type: ignore[arg-type]
        owner="host:1",
        input="in.jsonl",
        results="results",
        created_at=STARTED,
        config=RunConfig(),
        settings={},
        code_version="test",
        embedded=True,
    )
    return manifest.model_copy(update=update)


def _outcomes(done: list[str], failed: tuple[str, ...] = (), skipped: tuple[str, ...] = ()) -> RunOutcomes:
    outcomes = RunOutcomes("r1")
    for q in done:
        outcomes.results[q] = JobResult(
            run_id="r1",
            task="chunks",
            query_id=q,
            job_id=q,
            ranker="lexical",
            n_candidates=3,
            ranking=Ranking(indices=[0]),
            started_at=STARTED,
            finished_at=STARTED,
        )
    for kind, ids in (("job", failed), ("skipped", skipped)):
        for q in ids:
            outcomes.failures[f"{kind}/{q}"] = Failure(run_id="r1", kind=kind, error="x", query_id=q, task="chunks")
    return outcomes


PLAN = [{"task": "chunks", "query_id": q} for q in ("a", "b", "c")]


def test_every_job_with_its_outcome_ends_the_run_and_counts_it():
    manifest, pending = settle(_manifest(), _outcomes(["a", "b"], ("c",)), PLAN, [], False, False, None)
    assert (manifest.status, manifest.owner, pending) == ("complete_with_failures", None, [])
    assert {k: manifest.counts[k] for k in ("done", "failed", "pending")} == {"done": 2, "failed": 1, "pending": 0}
    assert manifest.status in MOVES["running"]


def test_pending_jobs_end_as_the_budget_or_a_gone_producer_leaves_them():
    spent, pending = settle(_manifest(), _outcomes(["a"], skipped=("b",)), PLAN, [], False, False, None)
    assert spent.status == "budget_exhausted" and [p["query_id"] for p in pending] == ["b", "c"]
    assert spent.owner is None  # ended: no producer owns it now
    gone, _ = settle(_manifest(), _outcomes(["a"]), PLAN, [], False, True, None)
    assert (gone.status, gone.error) == ("interrupted", "the producer stopped before the run ended")
    waiting, _ = settle(_manifest(), _outcomes(["a"]), PLAN, [], False, False, None)
    assert waiting.status == "incomplete"


def test_a_run_that_had_ended_keeps_its_end_and_its_limit_paths_are_cut_to_it():
    ended = STARTED + timedelta(seconds=30)
    manifest = _manifest("complete", finished_at=ended, config=RunConfig(models={"segments": "m"}))
    limits = {
        "http://h/v1 m": [(STARTED.timestamp() - 5, 1), (STARTED.timestamp() + 10, 2), (ended.timestamp() + 60, 8)]
    }
    settled, _ = settle(manifest, _outcomes(["a", "b", "c"]), PLAN, [], False, False, limits)
    assert settled.finished_at == ended and settled.timings["wall_s"] == 30.0
    assert settled.in_flight == {"http://h/v1 m": [[0.0, 1.0], [10.0, 2.0]]}  # its change after the end left out
