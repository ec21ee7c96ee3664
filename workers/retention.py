"""Runs as `prism runs` lists them, and a prune: the run folders prism/runs/retention.py says may
go, then the shared results (index/results/) that no kept run holds, and the index entries of
earlier releases that point into removed folders. What a later night reuses is what the kept
runs hold, so it survives; a prune that dies midway leaves nothing a night reads half gone (a
folder's manifest goes last, so the next prune finds the folder and finishes it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from prism.models import JobResult
from prism.runs.retention import RunEntry, Verdict
from workers.runfiles import Outcome, RunFiles, RunLayout
from workers.store import Store, get_model, index_key, result_key

log = structlog.get_logger("prism")

NO_MANIFEST = "no manifest"
RESULTS_PREFIX = result_key("").removesuffix(".json")
INDEX_PREFIX = index_key("")


def run_entries(store: Store) -> list[RunEntry]:
    """Every run folder of a store, newest first; one with no manifest (a prune that died after
    removing it, or a folder made by hand) is listed as such, oldest."""
    entries = []
    for run_id in store.folders("runs/"):
        files = RunFiles(store, run_id)
        try:
            manifest = files.manifest()
        except KeyError:
            entries.append(RunEntry(run_id, NO_MANIFEST, None, datetime.min.replace(tzinfo=UTC), 0, None))
            continue
        entries.append(
            RunEntry(
                run_id,
                manifest.status,
                manifest.corpus,
                manifest.created_at,
                manifest.counts.get("questions")
                or manifest.counts.get("documents", 0) + manifest.counts.get("chunks", 0),
                _usd(files),
            )
        )
    return sorted(entries, key=lambda r: r.created_at, reverse=True)


def _usd(files: RunFiles) -> float | None:
    try:
        total = files.json("cost.json")["total"]
    except (KeyError, json.JSONDecodeError):
        return None
    return float(total["usd"]) if total.get("usd_known", True) else None


@dataclass
class Pruned:
    runs: int = 0
    objects: int = 0  # in the removed run folders
    shared_results: int = 0  # shared results no kept run holds
    index_entries: int = 0  # earlier releases' index entries into removed folders


def prune(store: Store, verdict: Verdict) -> Pruned:
    """Remove what the verdict prunes, then what only it referred to."""
    done = Pruned()
    for run in verdict.pruned:
        removed = RunFiles(store, run.run_id).remove()
        done.runs, done.objects = done.runs + 1, done.objects + removed
        log.info("run pruned", run_id=run.run_id, objects=removed)
    held = _held(store, verdict.kept)
    stale = [k for k in store.keys(RESULTS_PREFIX) if k.removeprefix(RESULTS_PREFIX).removesuffix(".json") not in held]
    store.delete_many(stale)
    done.shared_results = len(stale)
    done.index_entries = _old_index(store, {r.run_id for r in verdict.kept})
    return done


def _held(store: Store, kept: list[RunEntry]) -> set[str]:
    """The job ids the kept runs hold: each run's jobs.txt, or, for a run made before runs wrote
    one, the job ids of the results in its folder."""
    held: set[str] = set()
    for run in kept:
        files = RunFiles(store, run.run_id)
        jobs = files.jobs()
        if jobs is None:
            folder = RunLayout(run.run_id).folder(Outcome.DONE)
            jobs = {get_model(store, key, JobResult).job_id for key in store.keys(folder)}
        held |= jobs
    return held


def _old_index(store: Store, kept: set[str]) -> int:
    """Remove the index entries an earlier release wrote that point into no kept run."""
    gone = []
    for key in store.keys(INDEX_PREFIX):
        try:
            target = store.get(key).decode()
        except KeyError:
            continue
        if RunLayout.run_of(target) not in kept:
            gone.append(key)
    store.delete_many(gone)
    return len(gone)
