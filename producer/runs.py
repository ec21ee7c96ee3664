"""A run's life: start (plan and enqueue), watch until every job has an outcome, finalize
(status, counts, report files), resume. The CLI is a thin layer over this."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from amqp.exceptions import ChannelError
from celery import Celery
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from prism.estimate import Estimate
from prism.llm import spending
from prism.models import PromptCheck, QuestionPlan, RunManifest, Usage
from prism.pricing import PriceTable
from producer import report
from producer.estimate import estimate_questions
from producer.plan import Plan, plan_run
from producer.prompt_check import CHECK_NAME, check_prompts
from producer.questions import enqueue_questions, gather, question_changes
from producer.spec import RunError, RunSpec
from producer.state import RunState, cost_report, usd_text
from workers import keys
from workers import ledger as ledgers
from workers import runtime as runtimes
from workers.app import make_app
from workers.batches import BatchDriver, BatchLimits
from workers.budget import RunBudget
from workers.circuit import outage_text
from workers.corpus import Corpus
from workers.embedded import embedded_worker
from workers.ledger import Ledger, Outcome, RunLayout, has_outcome, mark_last_over, outcome_keys
from workers.settings import Settings
from workers.store import Store, get_model, open_store, put_model

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
OWNER = f"{socket.gethostname()}:{os.getpid()}"
FINISHED = ("complete", "complete_with_failures", "incomplete", "budget_exhausted", "failed", "interrupted")
ENDED = ("complete", "complete_with_failures")  # every job has its outcome: a `--new` run may start from it
# What `prism run` and `prism resume` exit with, by the run's status, so a scheduler knows the night.
EXIT_CODES = {
    "complete": 0,
    "failed": 1,
    "complete_with_failures": 3,
    "budget_exhausted": 4,
    "incomplete": 5,
    "interrupted": 6,
}


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
    """The broker's queue and the workers' replies, as the producer's stall watch reads them."""

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
            budget_usd=spec.budget_usd,
            reuse=spec.reuse,
            corpus=spec.corpus,
            since=spec.since,
            via=spec.via,
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
    ):
        store, manifest = self.open_run(run_id, results)
        ledger = self.ledger(manifest.results)
        reopened = ledger.reopen(run_id, Outcome.SKIPPED)
        retried = ledger.reopen(run_id, Outcome.FAILED) if failed else 0
        budget = budget_usd if budget_usd is not None else manifest.budget_usd
        if budget is not None and self.runtime.redis is not None:
            RunBudget(self.runtime.redis, run_id, budget).reopen()
        spec = RunSpec(
            run_id,
            manifest.input,
            manifest.results,
            manifest.config,
            budget,
            manifest.reuse,
            corpus=manifest.corpus,
            since=manifest.since,
            via=manifest.via,
        )
        manifest = manifest.model_copy(update={"budget_usd": budget, "finished_at": None, "error": None})
        again = f", {retried} failed job(s) run again" if failed else ""
        self.console.print(f"resuming {run_id}: {reopened} job(s) the budget had stopped are pending again{again}")
        return self._execute(spec, manifest, wait, timeout)

    def _execute(self, spec: RunSpec, manifest: RunManifest, wait: bool, timeout: float | None) -> RunEnd:
        if not wait and self.settings.embedded:
            raise RunError("--no-wait needs a fleet (PRISM_BROKER_URL): embedded workers stop when the command ends")
        budget = self._budget(spec)
        store = self.runtime.store(spec.results)
        driver = self._batch_driver(spec, store)
        manifest = manifest.model_copy(update={"owner": OWNER, "status": "planning"})
        if not manifest.prompt_checks:
            manifest = manifest.model_copy(update={"prompt_checks": self._check_prompts(spec, budget)})
        put_model(store, RunLayout(spec.run_id).file("manifest.json"), manifest)
        spent = budget.exhausted if budget else (lambda: False)
        with embedded_worker(self.app, self.settings.embedded_workers) if self.settings.embedded else nullcontext():
            try:
                plan = self._plan(spec, store, spent)
            except Exception as err:  # noqa: BLE001 - the run is recorded failed, with the reason
                failed = manifest.model_copy(
                    update={"status": "failed", "error": f"planning failed: {_text(err)}", "finished_at": _now()}
                )
                put_model(store, RunLayout(spec.run_id).file("manifest.json"), failed)
                raise
            manifest = manifest.model_copy(
                update={
                    "status": "running",
                    "owner": OWNER if self.settings.embedded else None,
                    "counts": plan.counts(),
                    "changes": plan.changes or manifest.changes,
                    "corpus_versions": plan.corpus_versions or manifest.corpus_versions,
                    "timings": manifest.timings | {"plan_s": plan.seconds},
                }
            )
            put_model(store, RunLayout(spec.run_id).file("manifest.json"), manifest)
            if plan.queries + plan.questions == 0 and plan.invalid_rows == 0:
                error = f"{spec.input}: no input rows (an empty file, or a folder with no .jsonl files)"
                failed = manifest.model_copy(update={"status": "failed", "error": error, "finished_at": _now()})
                put_model(store, RunLayout(spec.run_id).file("manifest.json"), failed)
                raise RunError(error)
            if not wait:
                return RunEnd(manifest)
            state, requeues, paused = self.watch(
                RunState(store, spec.run_id), plan, timeout, lambda: self._plan(spec, store, spent), driver
            )
        timings = manifest.timings
        if paused:  # the time the run waited for its LLM provider, over every resume
            timings = timings | {"provider_unavailable_s": round(timings.get("provider_unavailable_s", 0) + paused, 3)}
        manifest = manifest.model_copy(update={"requeues": manifest.requeues + requeues, "timings": timings})
        end = self.finalize(state, manifest, spent())
        if end.manifest.changes:
            self.console.print(report.changes_text(end.manifest.changes))
        return end

    def _plan(self, spec: RunSpec, store: Store, spent: Callable[[], bool]) -> Plan:
        progress = self.runtime.progress
        base = progress.count(keys.progress(store.uri, spec.run_id)) if progress is not None else 0
        with self.console.status("planning...") as status:

            def on_query(p: Plan) -> None:
                status.update(f"planning: {p.documents} document and {p.chunks} chunk queries")

            ledger = self.ledger(spec.results)
            if spec.corpus is not None:  # a question set over a corpus: each question is planned on the fleet
                plan = enqueue_questions(spec, store, ledger, self.settings)
            else:
                plan = plan_run(spec, ledger, self.settings, spent, on_query=on_query)
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
        plan.progress_base = base
        return plan

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

    def _batch_driver(self, spec: RunSpec, store: Store) -> BatchDriver | None:
        """The producer submits and polls a batch-mode run's batches (its ids are in the run's
        store, so a resumed run polls them instead of submitting again)."""
        if spec.via != "batch":
            return None
        s, gateway = self.settings, self.runtime.gateway
        if gateway is None:
            return None  # no LLM: the $0 rankers make no request to batch
        if gateway.cache is None:
            raise RunError(
                "--via batch needs the response cache, where the batches' answers wait: set PRISM_CACHE=true"
            )
        limits = BatchLimits(s.batch_max_lines, int(s.batch_max_mb * 1024 * 1024), s.batch_max_tries, s.batch_gather_s)
        return BatchDriver(store, spec.run_id, gateway, limits, self._budget(spec))

    def _budget(self, spec: RunSpec) -> RunBudget | None:
        if spec.budget_usd is None:
            return None
        if self.runtime.redis is None:
            raise RunError("a run budget needs Redis: set PRISM_BROKER_URL (or PRISM_REDIS_URL)")
        prices = PriceTable.load(self.settings.prices_file)
        for stage in sorted(spec.config.paid_stages()):
            model = spec.config.models[stage]
            if prices.usd(model, Usage(prompt_tokens=1000)) is None:
                raise RunError(f"model {model!r} has no price, so a budget cannot be kept; add it to PRISM_PRICES_FILE")
        return RunBudget(self.runtime.redis, spec.run_id, spec.budget_usd)

    # -- watch -------------------------------------------------------------------------------

    def watch(
        self,
        state: RunState,
        plan: Plan,
        timeout: float | None,
        replan: Callable[[], Plan],
        driver: BatchDriver | None = None,
    ) -> tuple[RunState, int, float]:
        """Wait until every enqueued job has an outcome. Progress is counted beside the store
        (Redis, or memory when embedded); the store is read every few seconds for the cost
        line. When nothing moves for ``stall_s`` and no worker holds a task, the missing jobs
        were lost (a broker restart, a chord that cannot finish): enqueue them again,
        ``max_requeues`` times at most, then record them as failed. Outcomes are write-once,
        so a job that was only slow is not stored twice. While an LLM endpoint is down (its
        circuit open) the jobs wait for it: that is no stall, and the progress line says so.
        A batch-mode run's batches are polled, and new ones submitted, every ``batch_poll_s``.
        Returns the state, the requeues and the seconds the provider was unavailable."""
        s, progress = self.settings, self.runtime.progress
        run = keys.progress(state.store.uri, state.layout.run_id)
        planned_key = keys.planned(state.store.uri, state.layout.run_id)
        deadline = time.monotonic() + timeout if timeout else None

        def counted() -> Callable[[], tuple[int, int, bool]]:
            """Outcomes so far, the outcomes waited for, and whether that total is final: a
            question set's grows as its questions are planned (one each until then)."""
            rows = plan.queries - plan.not_enqueued
            if plan.questions:
                if progress is None:
                    return lambda: (state.poll().finished, *_planned(state, plan.questions))
                return lambda: (progress.count(run), *_total(progress.planned(planned_key), plan.questions))
            if progress is None:
                return lambda: (state.poll().finished, rows, True)
            base, offset = plan.progress_base, plan.already_done
            return lambda: (offset + progress.count(run) - base, rows, True)

        finished_now, requeues = counted(), 0
        last_finished, last_change, last_read, last_tick, batches = -1, time.monotonic(), 0.0, 0.0, ""
        summary, down, down_from, paused = "", "", 0.0, 0.0  # down: the outage line, from when
        calm_until = 0.0  # no stall before the jobs an outage deferred are back
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, TimeRemainingColumn(), console=self.console) as bar_view:
            bar = bar_view.add_task("ranking", total=None)
            while True:
                try:
                    if driver is not None and time.monotonic() - last_tick >= s.batch_poll_s:
                        batches, last_tick = "; " + driver.tick(), time.monotonic()
                    finished, expected, final = finished_now()
                    done = final and finished >= expected
                    if time.monotonic() - last_read > 10 or done:
                        state.poll()
                        last_read = time.monotonic()
                        summary = f" (failed {len(state.job_failures)}, {usd_text(cost_report(state)['total'])})"
                    outages = self.runtime.outages()
                except Exception as err:  # noqa: BLE001 - the store or Redis may be down a while
                    bar_view.console.print(
                        f"[yellow]cannot read the run's progress ({type(err).__name__}); retrying[/]"
                    )
                    time.sleep(2)
                    continue
                if outages:
                    line = f"{outage_text(outages)}, {max(0, expected - finished)} jobs waiting"
                    if not down:
                        down_from = time.monotonic()
                        said = f"{line}: {outages[0][1].error}; they wait for it up to PRISM_OUTAGE_S={s.outage_s:g} s"
                        bar_view.console.print(f"[yellow]{escape(said)}[/yellow]")
                    down, last_change = line, time.monotonic()  # the jobs wait for the provider: no stall
                    # A job deferred for it is back within its wait and the task's jitter (at most as long).
                    calm_until = time.monotonic() + 2 * max(o.wait_s() for _, o in outages)
                elif down:
                    paused += time.monotonic() - down_from
                    bar_view.console.print(f"provider back after {time.monotonic() - down_from:.0f} s unavailable")
                    down = ""
                bar_view.update(
                    bar,
                    completed=finished,
                    total=expected,
                    description=f"ranking{summary}{batches}" + (f"; {down}" if down else ""),
                )
                if done or (deadline and time.monotonic() > deadline):
                    return state, requeues, paused + (time.monotonic() - down_from if down else 0.0)
                if finished != last_finished:
                    last_finished, last_change = finished, time.monotonic()
                elif (
                    time.monotonic() > calm_until
                    and time.monotonic() - last_change > s.stall_s
                    and (fleet := self._fleet()).stalled
                ):
                    if fleet.queued:  # jobs wait and no worker is there to take them
                        bar_view.console.print(
                            f"[yellow]no progress for {s.stall_s:.0f} s, {fleet.queued} jobs queued and no worker "
                            "answers: start workers (celery -A workers.app worker)[/]"
                        )
                        last_change = time.monotonic()
                        continue
                    if requeues >= s.max_requeues:
                        self._record_lost(state, requeues)
                        continue
                    requeues += 1
                    bar_view.console.print(
                        f"[yellow]no progress for {s.stall_s:.0f} s and no worker busy: enqueuing the "
                        f"{expected - finished} missing jobs again[/yellow]"
                    )
                    plan = replan()
                    finished_now = counted()
                    last_change = time.monotonic()
                time.sleep(0.25 if s.embedded else 0.5)

    def _fleet(self) -> FleetView:
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

    def _record_lost(self, state: RunState, requeues: int) -> None:
        """Give every enqueued job still without an outcome a failure that says why."""
        layout, listed = state.layout, outcome_keys(state.store, state.layout.run_id)
        ledger = self.ledger(state.store.uri)
        error = f"no outcome after {requeues} requeue(s): the job was lost or its chord never completed"
        for p in _run_rows(state.store, layout, self.runtime.progress):
            if p["state"] in (Outcome.PENDING, "reused") or has_outcome(
                listed, layout.run_id, p["task"], p["query_id"]
            ):
                continue  # not enqueued (the budget), reused (an outcome by reference) or done
            ledger.lost(layout.run_id, p["task"], p["query_id"], p["line"], error)

    # -- finalize ----------------------------------------------------------------------------

    def finalize(self, state: RunState, manifest: RunManifest, budget_spent: bool = False) -> RunEnd:
        """The run's status and counts from what is stored, then every report file."""
        if manifest.corpus:  # a question set: its questions' plans, gathered into plan.jsonl and questions.jsonl
            plans, _ = gather(state.store, manifest.run_id, self.runtime.progress)
            manifest = manifest.model_copy(update={"counts": manifest.counts | _question_counts(plans)})
            if manifest.since and manifest.changes:
                manifest = manifest.model_copy(update={"changes": question_changes(manifest.changes, plans)})
        state.poll()  # after the gathering: the results reused by reference are named in plan.jsonl
        failed = state.job_failures
        outcomes = {(r.task, r.query_id) for r in state.results.values()} | {(f.task, f.query_id) for f in failed}
        pending = [p for p in _plan_rows(state.store, state.layout) if (p["task"], p["query_id"]) not in outcomes]
        counts = manifest.counts | {
            "done": len(state.results),
            "failed": len(failed),
            "invalid_rows": len(state.input_failures),
            "pending": len(pending),
            "skipped": len(state.skipped),
            "reused": sum(1 for r in state.results.values() if r.reused_from),
        }
        status, error = settle_status(manifest, counts, budget_spent or bool(state.skipped))
        # A run that had ended keeps its end: a later report does not move its wall time.
        ended = manifest.status in FINISHED and manifest.finished_at is not None
        now = manifest.finished_at if ended and manifest.finished_at else _now()
        manifest = manifest.model_copy(
            update={
                "status": status,
                "error": error,
                "owner": None if status in FINISHED else manifest.owner,
                "finished_at": now,
                "counts": counts,
                "timings": manifest.timings | {"wall_s": round((now - manifest.created_at).total_seconds(), 3)},
            }
        )
        corpus = Corpus(self.runtime.store(manifest.corpus)) if manifest.corpus else None
        cost, metrics = report.write(state, manifest, pending, corpus, self._estimate(manifest))
        if manifest.corpus and status in ENDED:  # what a `--new` run may start from
            mark_last_over(state.store, manifest.corpus, manifest.run_id)
        return RunEnd(manifest, cost, metrics, [f.error for f in state.input_failures])

    def _estimate(self, manifest: RunManifest) -> Estimate | str | None:
        """What `prism estimate --questions` says of a question-set run that calls an LLM (None
        otherwise), under the settings it ran with; why not, where it cannot be made."""
        config = manifest.config
        if manifest.corpus is None or not (config.uses_llm("documents") or config.uses_llm("chunks")):
            return None
        recorded = {k: manifest.settings[k] for k in ("filings_per_question", "service_tier") if k in manifest.settings}
        try:
            settings = self.settings.model_copy(update=recorded)
            outputs = config.expected_outputs(settings.llm_expected_output_tokens)
            return estimate_questions(manifest.input, manifest.corpus, settings, config, outputs).estimate
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
            return _planned(state, questions)[0]
        return _total(progress.planned(keys.planned(store.uri, manifest.run_id)), questions)[0]

    def open_run(self, run_id: str, results: str | None) -> tuple[Store, RunManifest]:
        check_run_id(run_id)
        store = open_store(results or self.settings.results, self.settings)
        try:
            return store, get_model(store, RunLayout(run_id).file("manifest.json"), RunManifest)
        except KeyError:
            raise RunError(f"no run {run_id!r} in {store.uri}") from None

    def refresh(self, run_id: str, results: str | None) -> tuple[Store, RunManifest]:
        """The run as stored, finalized as interrupted when its producer is gone."""
        store, manifest = self.open_run(run_id, results)
        if manifest.status in ("planning", "running") and manifest.owner and not _alive(manifest.owner):
            outcome = self.finalize(RunState(store, run_id), manifest)
            manifest = outcome.manifest
        return store, manifest


def _total(planned: tuple[int, int], questions: int) -> tuple[int, bool]:
    """The outcomes a question set waits for: its planned questions', one for each other."""
    count, outcomes = planned
    return outcomes + max(0, questions - count), count >= questions


def _planned(state: RunState, questions: int) -> tuple[int, bool]:
    """The same, read from the questions' plans in the store (no Redis to count them beside it)."""
    plans = [get_model(state.store, k, QuestionPlan) for k in state.store.keys(state.layout.file("questions/"))]
    return _total((len(plans), sum(p.outcomes for p in plans)), questions)


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


def _run_rows(store: Store, layout: RunLayout, progress: ledgers.Progress | None) -> Iterator[dict]:
    """The run's plan rows; a question set's gathered from its questions' plans first."""
    if store.exists(layout.file("questions-enqueued.jsonl")):
        gather(store, layout.run_id, progress)
    return _plan_rows(store, layout)


def _plan_rows(store: Store, layout: RunLayout) -> Iterator[dict]:
    try:
        data = store.get(layout.file("plan.jsonl"))
    except KeyError:
        return
    for line in data.splitlines():
        yield json.loads(line)


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
