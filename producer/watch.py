"""Watching a run to its end: progress counted beside the store (Redis, or memory when
embedded), the store read every few seconds for the cost line, an outage of the LLM provider
said and waited out, and a stalled fleet's missing jobs enqueued again.

When nothing moves for ``stall_s`` and no worker holds a task, the missing jobs were lost (a
broker restart, a chord that cannot finish): they are enqueued again, ``max_requeues`` times at
most, then recorded as failed. Outcomes are write-once, so a job that was only slow is not stored
twice. While an LLM endpoint is down (its circuit open) the jobs wait for it: that is no stall.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from prism.runs.outcomes import cost_report, usd_text
from producer.plan import Plan
from workers import keys
from workers.batches import batch_summary
from workers.circuit import outage_text
from workers.plans import planned, total
from workers.runstate import RunState
from workers.runtime import Runtime
from workers.settings import Settings, named
from workers.slots import slots_text

Counter = Callable[[], tuple[int, int, bool]]  # outcomes so far, outcomes waited for, whether final


class Fleet(Protocol):
    """What a stalled fleet looks like from the broker and the workers."""

    @property
    def queued(self) -> int: ...

    @property
    def stalled(self) -> bool: ...


class Runs(Protocol):
    """What the watch asks of the runs it watches (producer.runs.Runs)."""

    settings: Settings
    runtime: Runtime
    console: Console

    def fleet(self) -> Fleet: ...

    def record_lost(self, state: RunState, requeues: int) -> None: ...


@dataclass(frozen=True)
class Watched:
    """What a watch comes to: the run's state, its requeues, the seconds its provider was down."""

    state: RunState
    requeues: int
    paused: float


class Watch:
    def __init__(self, runs: Runs, state: RunState, plan: Plan, replan: Callable[[], Plan], batched: bool):
        self.runs, self.settings, self.state, self.replan = runs, runs.settings, state, replan
        self.batched = batched  # a batch-mode run: its batches are said on the progress line
        self.count = self._counter(plan)
        self.requeues, self.paused = 0, 0.0
        self.summary, self.batches, self.down = "", "", ""  # parts of the progress line; down: the outage's
        self.down_from, self.calm_until = 0.0, 0.0  # no stall before the jobs an outage deferred are back
        self.last_read = self.last_batches = 0.0
        self.last_finished, self.last_change = -1, time.monotonic()

    def until_done(self, timeout: float | None) -> Watched:
        deadline = time.monotonic() + timeout if timeout else None
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, TimeRemainingColumn(), console=self.runs.console) as view:
            bar = view.add_task("ranking", total=None)
            while True:
                try:
                    finished, expected, final = self.count()
                    done = final and finished >= expected
                    self._read(done)
                    outages = self.runs.runtime.outages()
                except Exception as err:  # noqa: BLE001 - the store or Redis may be down a while
                    view.console.print(f"[yellow]cannot read the run's progress ({type(err).__name__}); retrying[/]")
                    time.sleep(2)
                    continue
                self._outage(view, outages, expected - finished)
                line = f"ranking{self.summary}{self.batches}" + (f"; {self.down}" if self.down else "")
                if slots := slots_text(self.runs.runtime.limiter.slots.in_use()):
                    line += f"; {slots}"
                view.update(bar, completed=finished, total=expected, description=line)
                if done or (deadline and time.monotonic() > deadline):
                    down = time.monotonic() - self.down_from if self.down else 0.0
                    return Watched(self.state, self.requeues, self.paused + down)
                self._stall(view, finished, expected)
                time.sleep(0.25 if self.settings.embedded else 0.5)

    def _counter(self, plan: Plan) -> Counter:
        """Outcomes so far, the outcomes waited for, and whether that total is final: a question
        set's grows as its questions are planned (one each until then)."""
        state, progress = self.state, self.runs.runtime.progress
        run = keys.progress(state.store.uri, state.layout.run_id)
        planned_key = keys.planned(state.store.uri, state.layout.run_id)
        rows = plan.queries - plan.not_enqueued
        if plan.questions:
            if progress is None:
                return lambda: (state.poll().finished, *planned(state, plan.questions))
            return lambda: (progress.count(run), *total(progress.planned(planned_key), plan.questions))
        if progress is None:
            return lambda: (state.poll().finished, rows, True)
        base, offset = plan.progress_base, plan.already_done
        return lambda: (offset + progress.count(run) - base, rows, True)

    def _read(self, done: bool) -> None:
        """The store read for the cost line every 10 s, and a batch run's batches every poll."""
        now = time.monotonic()
        if now - self.last_read > 10 or done:
            self.state.poll()
            self.last_read = now
            self.summary = f" (failed {len(self.state.job_failures)}, {usd_text(cost_report(self.state)['total'])})"
        if self.batched and now - self.last_batches > self.settings.batch_poll_s:
            self.batches, self.last_batches = "; " + batch_summary(self.state.store, self.state.layout.run_id), now

    def _outage(self, view: Progress, outages: list, waiting: int) -> None:
        if outages:
            line = f"{outage_text(outages)}, {max(0, waiting)} jobs waiting"
            if not self.down:
                self.down_from = time.monotonic()
                said = f"{line}: {outages[0][1].error}; they wait for it up to {named('outage_s', f'{self.settings.outage_s:g}')} s"
                view.console.print(f"[yellow]{escape(said)}[/yellow]")
            self.down, self.last_change = line, time.monotonic()  # the jobs wait for the provider: no stall
            # A job deferred for it is back within its wait and the task's jitter (at most as long).
            self.calm_until = time.monotonic() + 2 * max(o.wait_s() for _, o in outages)
        elif self.down:
            self.paused += time.monotonic() - self.down_from
            view.console.print(f"provider back after {time.monotonic() - self.down_from:.0f} s unavailable")
            self.down = ""

    def _stall(self, view: Progress, finished: int, expected: int) -> None:
        """No progress for stall_s with no worker busy: say so, enqueue the missing jobs again, or
        (past max_requeues) record them lost."""
        s, now = self.settings, time.monotonic()
        if finished != self.last_finished:
            self.last_finished, self.last_change = finished, now
            return
        if now <= self.calm_until or now - self.last_change <= s.stall_s or not (fleet := self.runs.fleet()).stalled:
            return
        if fleet.queued:  # jobs wait and no worker is there to take them
            view.console.print(
                f"[yellow]no progress for {s.stall_s:.0f} s, {fleet.queued} jobs queued and no worker "
                "answers: start workers (celery -A workers.app worker)[/]"
            )
            self.last_change = now
            return
        if self.requeues >= s.max_requeues:
            self.runs.record_lost(self.state, self.requeues)
            return
        self.requeues += 1
        view.console.print(
            f"[yellow]no progress for {s.stall_s:.0f} s and no worker busy: enqueuing the "
            f"{expected - finished} missing jobs again[/yellow]"
        )
        self.count = self._counter(self.replan())
        self.last_change = time.monotonic()
