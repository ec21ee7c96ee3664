"""A run's life: start (plan and enqueue), watch until every job has an outcome (producer/watch.py),
finalize (status, counts, report files), resume. The commands are a thin layer over this."""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from amqp.exceptions import ChannelError
from celery import Celery
from rich.console import Console

from prism.estimate import Estimate
from prism.llm import spending
from prism.models import PromptCheck, QuestionPlan, RunManifest, Usage
from prism.pricing import PriceTable
from producer import report
from producer.estimate import estimate_plans
from producer.plan import Plan, plan_run
from producer.prompt_check import CHECK_NAME, check_prompts
from producer.questions import enqueue_questions, gather, question_changes
from producer.spec import RunError, RunSpec
from producer.state import RunState
from producer.watch import Watch, planned, total
from workers import keys
from workers import ledger as ledgers
from workers import runtime as runtimes
from workers.app import make_app
from workers.budget import RunBudget
from workers.corpus import Corpus
from workers.embedded import embedded_worker
from workers.ledger import Ledger, Outcome, has_outcome, mark_last_over, outcome_keys
from workers.runfiles import RunFiles
from workers.settings import Settings
from workers.store import Store, open_store

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
OWNER = f"{socket.gethostname()}:{os.getpid()}"
FINISHED = ("complete", "complete_with_failures", "incomplete", "budget_exhausted", "failed", "interrupted")
ENDED = ("complete", "complete_with_failures")  # every job has its outcome: a `--new` run may start from it


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise RunError(
            f"--run-id {run_id!r}: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return run_id


@dataclass(frozen=True)
class FleetView:
    """The broker's queue and the workers' replies, as the stall watch reads them."""

    queued: int
    answering: int
    working: bool

    @property
    def stalled(self) -> bool:
        """Nothing is running: the missing jobs were lost (idle) or nobody takes them."""
        return not self.working and (not self.queued or not self.answering)


@dataclass
class RunEnd:
    """What a finished (or stopped) run comes to, for the summary and the exit status."""

    manifest: RunManifest
    cost: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    input_errors: list[str] = field(default_factory=list)


class Runs:
    def __init__(self, settings: Settings, console: Console):
        self.settings, self.console = settings, console
        self.runtime = runtimes.Runtime(settings)
        self.app: Celery = make_app(settings)
        self.app.prism_runtime = self.runtime  # embedded workers rank with the producer's runtime
        self.app.set_current()

    # -- start and resume ------------------------------------------------------------------

    def start(self, spec: RunSpec, wait: bool, timeout: float | None) -> RunEnd:
        manifest = RunManifest(
            run_id=spec.run_id,
            status="planning",
            input=spec.input,
            results=spec.results,
            created_at=datetime.now(UTC),
            config=spec.config,
            settings=self.settings.masked(),
            code_version=code_version(),
            embedded=self.settings.embedded,
            reuse=spec.reuse,
            corpus=spec.corpus,
            since=spec.since,
        )
        return self._execute(spec, manifest, wait, timeout)

    def resume(
        self,
        run_id: str,
        results: str | None,
        budget_usd: Decimal | None,
        wait: bool,
        timeout: float | None,
        failed: bool = False,
    ) -> RunEnd:
        store, manifest = self.open_run(run_id, results)
        ledger = self.ledger(manifest.results)
        reopened = ledger.reopen(run_id, Outcome.SKIPPED)
        retried = ledger.reopen(run_id, Outcome.FAILED) if failed else 0
        budget = budget_usd if budget_usd is not None else manifest.config.budget_usd
        if budget is not None and self.runtime.redis is not None:
            RunBudget(self.runtime.redis, run_id, budget).reopen()
        config = manifest.config.model_copy(update={"budget_usd": budget})
        spec = RunSpec(
            run_id, manifest.input, manifest.results, config, manifest.reuse, manifest.corpus, manifest.since
        )
        manifest = manifest.model_copy(update={"config": config, "finished_at": None, "error": None})
        again = f", {retried} failed job(s) run again" if failed else ""
        self.console.print(f"resuming {run_id}: {reopened} job(s) the budget had stopped are pending again{again}")
        return self._execute(spec, manifest, wait, timeout)

    def _execute(self, spec: RunSpec, manifest: RunManifest, wait: bool, timeout: float | None) -> RunEnd:
        if not wait and self.settings.embedded:
            raise RunError("--no-wait needs a fleet (PRISM_BROKER_URL): embedded workers stop when the command ends")
        budget = self._budget(spec)
        files = RunFiles(self.runtime.store(spec.results), spec.run_id)
        self._check_batches(spec)
        manifest = manifest.model_copy(update={"owner": OWNER, "status": "planning"})
        if not manifest.prompt_checks:
            manifest = manifest.model_copy(update={"prompt_checks": self._check_prompts(spec, budget)})
        files.put_manifest(manifest)
        spent = budget.exhausted if budget else (lambda: False)
        with embedded_worker(self.app, self.settings.embedded_workers) if self.settings.embedded else nullcontext():
            plan, manifest = self._planned(spec, files, manifest, spent)
            if not wait:
                return RunEnd(manifest)
            state = RunState(files.store, spec.run_id)
            watch = Watch(self, state, plan, lambda: self._plan(spec, files.store, spent), spec.config.via == "batch")
            watched = watch.until_done(timeout)
        timings = manifest.timings
        if watched.paused:  # the time the run waited for its LLM provider, over every resume
            waited = round(timings.get("provider_unavailable_s", 0) + watched.paused, 3)
            timings = timings | {"provider_unavailable_s": waited}
        manifest = manifest.model_copy(update={"requeues": manifest.requeues + watched.requeues, "timings": timings})
        end = self.finalize(watched.state, manifest, spent())
        if end.manifest.changes:
            self.console.print(report.changes_text(end.manifest.changes))
        return end

    def _planned(
        self, spec: RunSpec, files: RunFiles, manifest: RunManifest, spent: Callable[[], bool]
    ) -> tuple[Plan, RunManifest]:
        """The run planned and enqueued, its manifest saying so; a planning that fails or finds no
        input ends the run failed, with the reason."""
        try:
            plan = self._plan(spec, files.store, spent)
        except Exception as err:  # noqa: BLE001 - the run is recorded failed, with the reason
            files.put_manifest(_failed(manifest, f"planning failed: {_text(err)}"))
            raise
        manifest = manifest.model_copy(
            update={
                "status": "running",
                "owner": OWNER if self.settings.embedded else None,
                "counts": plan.counts(),
                "changes": plan.changes or manifest.changes,
                "corpus_version": plan.corpus_version if plan.corpus_version is not None else manifest.corpus_version,
                "corpus_at": plan.corpus_at or manifest.corpus_at,
                "timings": manifest.timings | {"plan_s": plan.seconds},
            }
        )
        files.put_manifest(manifest)
        if plan.queries + plan.questions == 0 and plan.invalid_rows == 0:
            error = f"{spec.input}: no input rows (an empty file, or a folder with no .jsonl files)"
            files.put_manifest(_failed(manifest, error))
            raise RunError(error)
        return plan, manifest

    def _plan(self, spec: RunSpec, store: Store, spent: Callable[[], bool]) -> Plan:
        progress = self.runtime.progress
        base = progress.count(keys.progress(store.uri, spec.run_id)) if progress is not None else 0
        ledger = self.ledger(spec.results)
        with self.console.status("planning...") as status:
            if spec.corpus is not None:  # a question set over a corpus: each question is planned on the fleet
                plan = enqueue_questions(self.app, spec, store, ledger, self.settings)
            else:

                def on_query(p: Plan) -> None:
                    status.update(f"planning: {p.documents} document and {p.chunks} chunk queries")

                plan = plan_run(self.app, spec, ledger, self.settings, spent, on_query=on_query)
        self._said(spec, plan)
        plan.progress_base = base
        return plan

    def _said(self, spec: RunSpec, plan: Plan) -> None:
        if spec.corpus is not None:
            self.console.print(
                f"enqueued {plan.questions} questions for planning on the fleet; {plan.invalid_rows} invalid rows"
            )
            for line in plan.said:
                self.console.print(f"[yellow]qrel not judged:[/yellow] {line}", highlight=False)
            if plan.warnings > len(plan.said):
                self.console.print(f"... and {plan.warnings - len(plan.said)} more in warnings.jsonl")
        else:
            self.console.print(
                f"planned {plan.queries} queries ({plan.documents} documents, {plan.chunks} chunks): enqueued "
                f"{plan.enqueued}, already done {plan.already_done}, reused "
                f"{plan.reused}, left pending {plan.not_enqueued}; {plan.invalid_rows} invalid rows"
            )
        if plan.kept_failures:
            self.console.print(
                f"{plan.kept_failures} failed job(s) of this run kept as failed: "
                f"`prism resume {spec.run_id} --failed` runs them again"
            )

    def _check_prompts(self, spec: RunSpec, budget: RunBudget | None) -> list[PromptCheck]:
        """Whether each endpoint's model reads the system prompt (charged to the run's budget);
        said at once when one does not."""
        if self.runtime.gateway is None or not self.settings.check_system_prompt:
            return []
        with spending(budget):
            checks, calls = check_prompts(
                self.runtime.gateway, spec.config, spec.run_id, self.runtime.store(spec.results)
            )
        self.ledger(spec.results).spent_by_run(
            spec.run_id, calls, "the system-prompt check", CHECK_NAME, query_id=CHECK_NAME
        )
        for check in checks:
            if check.dropped is not False:
                self.console.print(f"[bold red]warning:[/bold red] {check.text()}", highlight=False)
        return checks

    def _check_batches(self, spec: RunSpec) -> None:
        """A batch-mode run's answers wait in the response cache, where its jobs find them (the
        fleet submits and polls its batches: workers/batches.py)."""
        gateway = self.runtime.gateway
        if spec.config.via == "batch" and gateway is not None and gateway.cache is None:
            raise RunError(
                "--via batch needs the response cache, where the batches' answers wait: set PRISM_CACHE=true"
            )

    def _budget(self, spec: RunSpec) -> RunBudget | None:
        if spec.config.budget_usd is None:
            return None
        if self.runtime.redis is None:
            raise RunError("a run budget needs Redis: set PRISM_BROKER_URL (or PRISM_REDIS_URL)")
        prices = PriceTable.load(self.settings.prices_file)
        for stage in sorted(spec.config.paid_stages()):
            model = spec.config.models[stage]
            if prices.usd(model, Usage(prompt_tokens=1000)) is None:
                raise RunError(f"model {model!r} has no price, so a budget cannot be kept; add it to PRISM_PRICES_FILE")
        return RunBudget(self.runtime.redis, spec.run_id, spec.config.budget_usd)

    # -- what the watch asks ---------------------------------------------------------------------

    def fleet(self) -> FleetView:
        """What the broker and the workers say: the queue's length (the embedded broker's too),
        and the workers' state (embedded: the in-process worker's own; a fleet: the workers'
        replies). The broker down counts as busy, since nothing can be told."""
        try:
            queued = self._queued()
            if self.settings.embedded:
                from celery.worker import state as worker_state

                busy = [*worker_state.active_requests, *worker_state.reserved_requests]
                return FleetView(queued, answering=1, working=bool(busy))
            inspect = self.app.control.inspect(timeout=1.0)
            replies = (inspect.active() or {}, inspect.reserved() or {}, inspect.scheduled() or {})
            answering = len(set().union(*replies))
            return FleetView(queued, answering, working=any(any(r.values()) for r in replies))
        except Exception:  # noqa: BLE001
            return FleetView(queued=0, answering=0, working=True)

    def _queued(self) -> int:
        """Messages waiting on the broker, at every priority."""
        with self.app.connection_for_read() as conn:
            try:
                return conn.default_channel.queue_declare(
                    queue=self.app.conf.task_default_queue, passive=True
                ).message_count
            except ChannelError:  # no such queue: a restarted broker that lost it, so nothing waits
                return 0

    def record_lost(self, state: RunState, requeues: int) -> None:
        """Give every enqueued job still without an outcome a failure that says why."""
        layout, listed = state.layout, outcome_keys(state.store, state.layout.run_id)
        ledger = self.ledger(state.store.uri)
        error = f"no outcome after {requeues} requeue(s): the job was lost or its chord never completed"
        for p in _run_rows(state.files, self.runtime.progress):
            if p["state"] == Outcome.PENDING or has_outcome(listed, layout.run_id, p["task"], p["query_id"]):
                continue  # not enqueued (the budget), or it has its outcome
            ledger.lost(layout.run_id, p["task"], p["query_id"], p["line"], error)

    # -- finalize ----------------------------------------------------------------------------

    def finalize(self, state: RunState, manifest: RunManifest, budget_spent: bool = False) -> RunEnd:
        """The run's status and counts from what is stored, then every report file."""
        plans: list[QuestionPlan] = []
        if manifest.corpus:  # a question set: its questions' plans, gathered into plan.jsonl and questions.jsonl
            plans, _ = gather(state.store, manifest.run_id, self.runtime.progress)
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
        corpus = Corpus(self.runtime.store(manifest.corpus)) if manifest.corpus else None
        cost, metrics = report.write(state, manifest, pending, corpus, self._estimate(manifest, plans, corpus))
        if manifest.corpus and manifest.status in ENDED:  # what a `--new` run may start from
            mark_last_over(state.store, manifest.corpus, manifest.run_id)
        return RunEnd(manifest, cost, metrics, [f.error for f in state.input_failures])

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
            return _text(err)

    # -- reading runs ------------------------------------------------------------------------

    def ledger(self, results: str) -> Ledger:
        return self.runtime.ledger(results)

    def expected(self, store: Store, manifest: RunManifest) -> int:
        """The outcomes a run waits for: its planned queries, or a question set's planned
        questions' outcomes (one for each question not planned yet)."""
        questions = manifest.counts.get("questions", 0)
        if not manifest.corpus or manifest.status not in ("planning", "running"):
            return manifest.counts.get("documents", 0) + manifest.counts.get("chunks", 0)
        progress, state = self.runtime.progress, RunState(store, manifest.run_id)
        if progress is None:
            return planned(state, questions)[0]
        return total(progress.planned(keys.planned(store.uri, manifest.run_id)), questions)[0]

    def open_run(self, run_id: str, results: str | None) -> tuple[Store, RunManifest]:
        check_run_id(run_id)
        store = open_store(results or self.settings.results, self.settings)
        try:
            return store, RunFiles(store, run_id).manifest()
        except KeyError:
            raise RunError(f"no run {run_id!r} in {store.uri}") from None

    def refresh(self, run_id: str, results: str | None) -> tuple[Store, RunManifest]:
        """The run as stored, finalized as interrupted when its producer is gone."""
        store, manifest = self.open_run(run_id, results)
        if manifest.status in ("planning", "running") and manifest.owner and not _alive(manifest.owner):
            outcome = self.finalize(RunState(store, run_id), manifest)
            manifest = outcome.manifest
        return store, manifest


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


def _failed(manifest: RunManifest, error: str) -> RunManifest:
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


def _run_rows(files: RunFiles, progress: ledgers.Progress | None) -> Iterator[dict]:
    """The run's plan rows; a question set's gathered from its questions' plans first."""
    if files.has_enqueued():
        gather(files.store, files.layout.run_id, progress)
    return files.plan()


def code_version() -> str:
    import subprocess
    from importlib.metadata import version
    from pathlib import Path

    text = version("prism-fleet")
    try:
        here = Path(__file__).resolve().parent
        sha = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if sha.returncode == 0 and sha.stdout.strip():
            text += f"+{sha.stdout.strip()}"
    except OSError:
        pass
    return text


def _now() -> datetime:
    return datetime.now(UTC)


def _text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
