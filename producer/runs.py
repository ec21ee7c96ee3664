"""A run's life: start (plan and enqueue), watch until every job has an outcome (producer/watch.py),
finalize (status, counts, report files), resume. The commands are a thin layer over this."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal

from amqp.exceptions import ChannelError
from celery import Celery
from rich.console import Console

from prism.llm import spending
from prism.llm.pricing import PriceTable
from prism.models import PromptCheck, RunManifest, Usage
from prism.runs.lifecycle import error_text, with_failure
from producer import report
from producer.plan import Plan, plan_run
from producer.prompt_check import CHECK_NAME, check_prompts
from producer.questions import enqueue_questions
from producer.reader import OWNER, RunEnd, RunReader
from producer.spec import RunError, RunSpec
from producer.watch import Watch
from workers import keys
from workers import ledger as ledgers
from workers import runtime as runtimes
from workers.app import make_app
from workers.budget import RunBudget
from workers.embedded import embedded_worker
from workers.ledger import Ledger, has_outcome, outcome_keys
from workers.plans import gather
from workers.runfiles import Outcome, RunFiles
from workers.runstate import RunState
from workers.settings import Settings, flag, named
from workers.store import Store


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


class Runs:
    def __init__(self, settings: Settings, console: Console):
        self.settings, self.console = settings, console
        self.runtime = runtimes.Runtime(settings)
        self.app: Celery = make_app(settings)
        self.app.prism_runtime = self.runtime  # embedded workers rank with the producer's runtime
        self.app.set_current()
        self.reader = RunReader(settings, self.runtime.store, self.runtime.progress, self.runtime.limiter.slots.board)

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
        manifest = self.reader.open_run(run_id, results)[1]
        ledger = self.ledger(manifest.results)
        reopened = ledger.reopen(run_id, Outcome.SKIPPED)
        retried = ledger.reopen(run_id, Outcome.FAILED) if failed else 0
        budget = budget_usd if budget_usd is not None else manifest.config.budget_usd
        if budget is not None and self.runtime.redis is not None:
            RunBudget(self.runtime.redis, run_id, budget).reopen()
        config = manifest.config.model_copy(update={"budget_usd": budget})
        pinned = manifest.corpus_versions or manifest.corpus_version  # a run from before pinned its filings alone
        spec = RunSpec(
            run_id, manifest.input, manifest.results, config, manifest.reuse, manifest.corpus, manifest.since, pinned
        )
        manifest = manifest.model_copy(update={"config": config, "finished_at": None, "error": None})
        again = f", {retried} failed job(s) run again" if failed else ""
        self.console.print(f"resuming {run_id}: {reopened} job(s) the budget had stopped are pending again{again}")
        return self._execute(spec, manifest, wait, timeout)

    def _execute(self, spec: RunSpec, manifest: RunManifest, wait: bool, timeout: float | None) -> RunEnd:
        if not wait and self.settings.embedded:
            raise RunError(
                f"--no-wait needs a fleet ({named('broker_url')}): embedded workers stop when the command ends"
            )
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
            spec = replace(spec, corpus_versions=manifest.corpus_versions or spec.corpus_versions)  # a requeue's too
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
            files.put_manifest(with_failure(manifest, f"planning failed: {error_text(err)}"))
            raise
        manifest = manifest.model_copy(
            update={
                "status": "running",
                "owner": OWNER if self.settings.embedded else None,
                "counts": plan.counts(),
                "changes": plan.changes or manifest.changes,
                "corpus_version": plan.corpus_version if plan.corpus_version is not None else manifest.corpus_version,
                "corpus_versions": plan.corpus_versions or manifest.corpus_versions,
                "corpus_at": plan.corpus_at or manifest.corpus_at,
                "timings": manifest.timings | {"plan_s": plan.seconds},
            }
        )
        files.put_manifest(manifest)
        if plan.queries + plan.questions == 0 and plan.invalid_rows == 0:
            error = f"{spec.input}: no input rows (an empty file, or a folder with no .jsonl files)"
            files.put_manifest(with_failure(manifest, error))
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
                f"{flag('via')} batch needs the response cache, where the batches' answers wait: set {named('cache', 'true')}"
            )

    def _budget(self, spec: RunSpec) -> RunBudget | None:
        if spec.config.budget_usd is None:
            return None
        if self.runtime.redis is None:
            raise RunError(f"a run budget needs Redis: set {named('broker_url')} (or {named('redis_url')})")
        prices = PriceTable.load(self.settings.prices_file)
        for stage in sorted(spec.config.paid_stages()):
            model = spec.config.models[stage]
            if prices.usd(model, Usage(prompt_tokens=1000)) is None:
                raise RunError(
                    f"model {model!r} has no price, so a budget cannot be kept; add it to {named('prices_file')}"
                )
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
            if p["state"] in (Outcome.PENDING, "reused") or has_outcome(
                listed, layout.run_id, p["task"], p["query_id"]
            ):
                continue  # not enqueued (the budget), or it has its outcome (a reused pair's is its plan)
            ledger.lost(layout.run_id, p["task"], p["query_id"], p["line"], error)

    # -- finalize ----------------------------------------------------------------------------

    def ledger(self, results: str) -> Ledger:
        return self.runtime.ledger(results)

    def finalize(self, state: RunState, manifest: RunManifest, budget_spent: bool = False) -> RunEnd:
        return self.reader.finalize(state, manifest, budget_spent)


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
