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

from prism.llm import Outage
from prism.models import RunManifest
from prism.runs.lifecycle import ENDED, settle
from prism.runs.reckoning import reckon
from producer import report
from producer.spec import RunError
from workers import keys
from workers.circuit import Circuits, endpoints_down
from workers.corpus import Corpus
from workers.inputs import estimate_run
from workers.ledger import Progress, RedisProgress, mark_last_over
from workers.plans import gather, planned, total
from workers.runstate import RunState, read_evidence
from workers.settings import Settings
from workers.slots import LocalSlots, RedisSlots, SlotsNow
from workers.store import Store, open_store

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
OWNER = f"{socket.gethostname()}:{os.getpid()}"


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
        """Read what the run stored (a question set's plans gathered into plan.jsonl and
        questions.jsonl), settle its status and counts (prism/runs/lifecycle.py), reckon what it came to
        (prism/runs/outcomes.py), put that in words, then write the report files and the manifest."""
        gone = bool(manifest.owner) and not _alive(manifest.owner or "")
        recorded = {k: manifest.settings[k] for k in ("service_tier",) if k in manifest.settings}
        settings = self.settings.model_copy(update=recorded)
        corpus = Corpus(self.store(manifest.corpus)) if manifest.corpus else None
        plans = gather(state.store, manifest.run_id, self.progress)[0] if manifest.corpus else []
        state.poll()
        plan, limits = list(state.files.plan()), self.slots.paths() if self.slots is not None else None
        evidence = read_evidence(state, corpus) if corpus is not None else None
        estimate = estimate_run(plans, corpus, settings, manifest.config) if corpus is not None else None
        manifest, pending = settle(manifest, state, plan, plans, budget_spent, gone, limits)
        figures = reckon(state, evidence)
        files = report.compose(state, manifest, pending, figures, estimate)
        state.files.put_report(files)
        state.files.put_manifest(manifest)
        if manifest.corpus and manifest.status in ENDED:  # what a `--new` run may start from
            mark_last_over(state.store, manifest.corpus, manifest.run_id)
        return RunEnd(manifest, files.cost, files.metrics, files.summary, [f.error for f in state.input_failures])

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
