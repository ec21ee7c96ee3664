"""A run's status: the moves its manifest may make (workers/runfiles.py enforces them), and how
what a run stored settles its status, counts and end when it is finalized (producer/reader.py
reads what is stored and writes what this decides)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prism.models import QuestionPlan, RunManifest

if TYPE_CHECKING:
    from prism.runs.outcomes import RunOutcomes

# The statuses a run's manifest may move to from each: a finished run moves on only by being
# planned again (a resume, a rerun of its id) or by being finalized again (a later report).
FINISHED = ("complete", "complete_with_failures", "incomplete", "budget_exhausted", "failed", "interrupted")
MOVES: dict[str, frozenset[str]] = {
    "planning": frozenset({"planning", "running", "failed", "interrupted"}),
    "running": frozenset({"planning", "running", *FINISHED}),
} | {status: frozenset({"planning", *FINISHED}) for status in FINISHED}
ENDED = ("complete", "complete_with_failures")  # every job has its outcome: a `--new` run may start from it

Points = list[tuple[float, int]]  # an adaptive limit's changes: (epoch seconds, limit)


def settle(
    manifest: RunManifest,
    outcomes: RunOutcomes,
    plan: list[dict],
    plans: list[QuestionPlan],
    budget_spent: bool,
    owner_gone: bool,
    limits: dict[str, Points] | None,
) -> tuple[RunManifest, list[dict]]:
    """The manifest as what is stored leaves it, and the plan's rows still pending. ``plans`` are a
    question set's questions' plans; ``limits``, the fleet's adaptive limits' changes where it
    keeps them (None: the manifest's paths stand)."""
    counts = manifest.counts
    if manifest.corpus:
        counts = counts | _question_counts(plans)
        if manifest.since and manifest.changes:
            manifest = manifest.model_copy(update={"changes": question_changes(manifest.changes, plans)})
    ended: set[tuple[str | None, str | None]] = {(r.task, r.query_id) for r in outcomes.results.values()}
    ended |= {(f.task, f.query_id) for f in outcomes.job_failures}
    pending = [p for p in plan if (p["task"], p["query_id"]) not in ended]
    counts = counts | {
        "done": len(outcomes.results),
        "failed": len(outcomes.job_failures),
        "invalid_rows": len(outcomes.input_failures),
        "pending": len(pending),
        "skipped": len(outcomes.skipped),
        "reused": sum(1 for r in outcomes.results.values() if r.reused_from),
    }
    status, error = settle_status(manifest, counts, budget_spent or bool(outcomes.skipped), owner_gone)
    finished = manifest.status in FINISHED and manifest.finished_at is not None
    # A run that had ended keeps its end, so a later report does not move its wall time.
    now = manifest.finished_at if finished and manifest.finished_at else datetime.now(UTC)
    settled = manifest.model_copy(
        update={
            "status": status,
            "error": error,
            "owner": None if status in FINISHED else manifest.owner,
            "finished_at": now,
            "counts": counts,
            "timings": manifest.timings | {"wall_s": round((now - manifest.created_at).total_seconds(), 3)},
        }
    )
    return settled.model_copy(update={"in_flight": _limit_paths(settled, limits)}), pending


def settle_status(manifest: RunManifest, counts: dict, budget_spent: bool, owner_gone: bool) -> tuple[str, str | None]:
    if manifest.status == "failed":
        return "failed", manifest.error
    if manifest.status == "planning":
        return "interrupted", manifest.error or "the producer stopped while planning"
    if manifest.status == "interrupted" and counts.get("pending", 0):
        return "interrupted", manifest.error  # until a resume, whoever finalizes it again
    done, failed, pending = counts.get("done", 0), counts.get("failed", 0), counts.get("pending", 0)
    if owner_gone and pending:
        return "interrupted", "the producer stopped before the run ended"
    if not done and (failed or counts.get("invalid_rows", 0)) and not pending:
        return "failed", "no query got a result"
    if not pending:
        if failed or counts.get("invalid_rows", 0):
            return "complete_with_failures", None
        return "complete", None
    if budget_spent:
        return "budget_exhausted", None
    return "incomplete", None


def with_failure(manifest: RunManifest, error: str) -> RunManifest:
    return manifest.model_copy(update={"status": "failed", "error": error, "finished_at": datetime.now(UTC)})


def error_text(err: BaseException) -> str:
    """An error as a run's manifest and report say it."""
    return f"{type(err).__name__}: {err}"


def question_changes(changes: dict, plans: list[QuestionPlan]) -> dict:
    """The filing changes with how the questions stood against the earlier run."""
    stood = Counter(p.since for p in plans)
    return changes | {
        "unchanged_questions": stood["unchanged"],
        "new_questions": stood["new_question"],
        "changed_questions": stood["changed_question"],
        "questions_with_changed_filings": stood["changed_filings"],
        "questions_with_lost_results": stood["lost_result"],
    }


def _question_counts(plans: list[QuestionPlan]) -> dict[str, int]:
    return {
        "questions": len(plans),
        "documents": sum(p.documents is not None for p in plans),
        "chunks": sum(len(p.pairs) or 1 for p in plans),
        "segments": sum(pair.segments for p in plans for pair in p.pairs),
        # results an index or an earlier run named that were gone (pruned, expired): ranked again
        "lost_results": sum(p.since == "lost_result" for p in plans)
        + sum(bool(pair.lost) for p in plans for pair in p.pairs),
    }


def _limit_paths(manifest: RunManifest, limits: dict[str, Points] | None) -> dict[str, list[list[float]]]:
    """Each adaptive limit's path over the run, of the models it ran (none kept: as recorded)."""
    if limits is None:
        return manifest.in_flight
    since, until = manifest.created_at.timestamp(), (manifest.finished_at or datetime.now(UTC)).timestamp()
    models = set(manifest.config.models.values())
    paths = {name: limit_path(points, since, until) for name, points in limits.items()}
    return {name: path for name, path in paths.items() if path and name.split(" ", 1)[-1] in models}


def limit_path(points: Points, since: float, until: float, most: int = 12) -> list[list[float]]:
    """A limit's path from ``since`` to ``until`` (epoch seconds) as at most ``most`` points of
    [seconds from ``since``, limit]: the limit it had at ``since``, then its changes, thinned
    evenly where there are more (the last kept)."""
    before = [limit for at, limit in points if at <= since]
    path = [[0.0, float(before[-1])]] if before else []
    path += [[round(at - since, 1), float(limit)] for at, limit in points if since < at <= until]
    if len(path) <= most:
        return path
    step = (len(path) - 1) / (most - 1)
    return [path[round(i * step)] for i in range(most)]
