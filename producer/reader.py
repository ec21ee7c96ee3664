"""A run as its store holds it: open it, finalize it (status, counts, report files), and
finalize a run whose producer is gone. Needs no broker and builds no fleet: `prism report`,
`status` and `eval` read runs through this alone (Redis is read where one is configured, for
the progress counters)."""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

import redis

from prism.estimate import Estimate
from prism.llm import Outage
from prism.models import QuestionPlan, RunManifest
from producer import report
from producer.estimate import estimate_plans
from producer.plans import gather, planned, question_changes, total
from producer.spec import RunError
from producer.state import RunState
from workers import keys
from workers.circuit import Circuits, endpoints_down
from workers.corpus import Corpus
from workers.ledger import Progress, RedisProgress, mark_last_over
from workers.runfiles import FINISHED
from workers.settings import Settings
from workers.slots import LocalSlots, RedisSlots, SlotsNow, limit_path
from workers.store import Store, open_store

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
OWNER = f"{socket.gethostname()}:{os.getpid()}"
ENDED = ("complete", "complete_with_failures")  # every job has its outcome: a `--new` run may start from it


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise RunError(
            f"--run-id {run_id!r}: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return run_id


@dataclass
class RunEnd:
    """What a finished (or stopped) run comes to, for the summary and the exit status."""

    manifest: RunManifest
    cost: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)  # quality, latency, tokens and USD per task (summary.json)
    input_errors: list[str] = field(default_factory=list)


class RunReader:
    """Runs as stored. ``stores`` opens a store by URI (the fleet's runtime shares its own);
    ``progress`` is the fleet's progress counters, where there are any; ``slots``, its requests in
    flight and their limits (an embedded run's own)."""

    def __init__(
        self,
        settings: Settings,
        stores: Callable[[str], Store] | None = None,
        progress: Progress | None = None,
        slots: LocalSlots | RedisSlots | None = None,
    ):
        self.settings = settings
        self._opened: dict[str, Store] = {}
        self._stores = stores or self._open
        self._progress = progress
        self._slots = slots

    def _open(self, uri: str) -> Store:
        if uri not in self._opened:
            self._opened[uri] = open_store(uri, self.settings)
        return self._opened[uri]

    @cached_property
    def redis(self) -> redis.Redis | None:
        url = self.settings.shared_redis
        return redis.Redis.from_url(url, socket_timeout=10) if url else None

    @cached_property
    def progress(self) -> Progress | None:
        if self._progress is not None:
            return self._progress
        return RedisProgress(self.redis) if self.redis is not None else None

    @cached_property
    def slots(self) -> LocalSlots | RedisSlots | None:
        if self._slots is not None:
            return self._slots
        return RedisSlots(self.redis) if self.redis is not None else None

    def fleet_now(self) -> tuple[list[tuple[str, Outage]], dict[str, SlotsNow]]:
        """What Redis says of the fleet now, where one is configured: the LLM endpoints that are
        down, and each (endpoint, model)'s slots in use and limit."""
        if self.redis is None or self.slots is None:
            return [], {}
        down = (
            endpoints_down(Circuits(self.redis), self.settings.endpoints().values())
            if self.settings.llm_configured
            else []
        )
        return down, self.slots.in_use()

    def store(self, uri: str) -> Store:
        return self._stores(uri)

    def open_run(self, run_id: str, results: str | None) -> tuple[RunState, RunManifest]:
        """The run's state (not read yet) and manifest."""
        check_run_id(run_id)
        state = RunState(self.store(results or self.settings.results), run_id)
        try:
            return state, state.files.manifest()
        except KeyError:
            raise RunError(f"no run {run_id!r} in {state.store.uri}") from None

    def finalize(self, state: RunState, manifest: RunManifest, budget_spent: bool = False) -> RunEnd:
        """The run's status and counts from what is stored, then every report file, then the manifest."""
        plans: list[QuestionPlan] = []
        if manifest.corpus:  # a question set: its questions' plans, gathered into plan.jsonl and questions.jsonl
            plans, _ = gather(state.store, manifest.run_id, self.progress)
            manifest = manifest.model_copy(update={"counts": manifest.counts | _question_counts(plans)})
            if manifest.since and manifest.changes:
                manifest = manifest.model_copy(update={"changes": question_changes(manifest.changes, plans)})
        state.poll()
        outcomes: set[tuple[str | None, str | None]] = {(r.task, r.query_id) for r in state.results.values()}
        outcomes |= {(f.task, f.query_id) for f in state.job_failures}
        pending = [p for p in state.files.plan() if (p["task"], p["query_id"]) not in outcomes]
        counts = manifest.counts | {
            "done": len(state.results),
            "failed": len(state.job_failures),
            "invalid_rows": len(state.input_failures),
            "pending": len(pending),
            "skipped": len(state.skipped),
            "reused": sum(1 for r in state.results.values() if r.reused_from),
        }
        manifest = _settled(manifest, counts, budget_spent or bool(state.skipped))
        manifest = manifest.model_copy(update={"in_flight": self._limit_paths(manifest)})
        corpus = Corpus(self.store(manifest.corpus)) if manifest.corpus else None
        files = report.compose(state, manifest, pending, corpus, self._estimate(manifest, plans, corpus))
        state.files.put_report(files)
        state.files.put_manifest(manifest)
        if manifest.corpus and manifest.status in ENDED:  # what a `--new` run may start from
            mark_last_over(state.store, manifest.corpus, manifest.run_id)
        return RunEnd(manifest, files.cost, files.metrics, files.summary, [f.error for f in state.input_failures])

    def _limit_paths(self, manifest: RunManifest) -> dict[str, list[list[float]]]:
        """Each adaptive limit's path over the run, where the fleet keeps them (none: as recorded)."""
        if self.slots is None:
            return manifest.in_flight
        since, until = manifest.created_at.timestamp(), (manifest.finished_at or datetime.now(UTC)).timestamp()
        models = set(manifest.config.models.values())
        paths = {name: limit_path(points, since, until) for name, points in self.slots.paths().items()}
        return {name: path for name, path in paths.items() if path and name.split(" ", 1)[-1] in models}

    def _estimate(
        self, manifest: RunManifest, plans: list[QuestionPlan], corpus: Corpus | None
    ) -> Estimate | str | None:
        """What the run's plans would cost as `prism estimate` prices them, for a question-set run
        that calls an LLM (None otherwise), under the settings it ran with; why not, where it
        cannot be made. The plans are the run's own: nothing is planned again, no filing read."""
        config = manifest.config
        if corpus is None or not (config.uses_llm("documents") or config.uses_llm("chunks")):
            return None
        recorded = {k: manifest.settings[k] for k in ("service_tier",) if k in manifest.settings}
        try:
            settings = self.settings.model_copy(update=recorded)
            return estimate_plans(plans, corpus, settings, config)
        except Exception as err:  # noqa: BLE001 - the report says why and is written all the same
            return error_text(err)

    def expected(self, store: Store, manifest: RunManifest) -> int:
        """The outcomes a run waits for: its planned queries, or a question set's planned
        questions' outcomes (one for each question not planned yet)."""
        questions = manifest.counts.get("questions", 0)
        if not manifest.corpus or manifest.status not in ("planning", "running"):
            return manifest.counts.get("documents", 0) + manifest.counts.get("chunks", 0)
        progress, state = self.progress, RunState(store, manifest.run_id)
        if progress is None:
            return planned(state, questions)[0]
        return total(progress.planned(keys.planned(store.uri, manifest.run_id)), questions)[0]

    def refresh(self, run_id: str, results: str | None) -> tuple[RunState, RunManifest]:
        """The run as stored, finalized as interrupted when its producer is gone."""
        state, manifest = self.open_run(run_id, results)
        if manifest.status in ("planning", "running") and manifest.owner and not _alive(manifest.owner):
            manifest = self.finalize(state, manifest).manifest
        return state, manifest


def _settled(manifest: RunManifest, counts: dict, budget_spent: bool) -> RunManifest:
    """The manifest with its status, counts and end time; a run that had ended keeps its end, so a
    later report does not move its wall time."""
    status, error = settle_status(manifest, counts, budget_spent)
    ended = manifest.status in FINISHED and manifest.finished_at is not None
    now = manifest.finished_at if ended and manifest.finished_at else _now()
    return manifest.model_copy(
        update={
            "status": status,
            "error": error,
            "owner": None if status in FINISHED else manifest.owner,
            "finished_at": now,
            "counts": counts,
            "timings": manifest.timings | {"wall_s": round((now - manifest.created_at).total_seconds(), 3)},
        }
    )


def settle_status(manifest: RunManifest, counts: dict, budget_spent: bool) -> tuple[str, str | None]:
    if manifest.status == "failed":
        return "failed", manifest.error
    if manifest.status == "planning":
        return "interrupted", manifest.error or "the producer stopped while planning"
    if manifest.status == "interrupted" and counts.get("pending", 0):
        return "interrupted", manifest.error  # until a resume, whoever finalizes it again
    done, failed, pending = counts.get("done", 0), counts.get("failed", 0), counts.get("pending", 0)
    if manifest.owner and not _alive(manifest.owner) and pending:
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
    return manifest.model_copy(update={"status": "failed", "error": error, "finished_at": _now()})


def _alive(owner: str) -> bool:
    """Whether the producer named "host:pid" still runs; one on another host is assumed alive."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _question_counts(plans: list[QuestionPlan]) -> dict[str, int]:
    return {
        "questions": len(plans),
        "documents": sum(p.documents is not None for p in plans),
        "chunks": sum(len(p.pairs) or 1 for p in plans),
        "segments": sum(pair.segments for p in plans for pair in p.pairs),
    }


def _now() -> datetime:
    return datetime.now(UTC)


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
