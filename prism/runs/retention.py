"""Which runs a prune removes, pure: the runs past the newest ``keep`` (and, where given, older
than ``older_than_days``), never the newest complete run over each corpus (a `--new` night
starts from it) and never a run in progress. Prune refuses outright while a run is in progress:
what it would collect afterwards (results no kept run refers to) could be one that run is about
to refer to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from prism.runs.lifecycle import ENDED

IN_PROGRESS = ("planning", "running")


@dataclass(frozen=True)
class RunEntry:
    """A run as `prism runs` lists it."""

    run_id: str
    status: str
    corpus: str | None
    created_at: datetime
    questions: int
    usd: float | None


class PruneError(ValueError):
    """A prune that would remove nothing it was asked to, or what it must not: one line, nothing deleted."""


@dataclass(frozen=True)
class Verdict:
    pruned: list[RunEntry]
    kept: list[RunEntry]
    reasons: dict[str, str]  # why each kept run stays, by run id


def newest_complete(runs: Iterable[RunEntry]) -> dict[str, RunEntry]:
    """The newest complete run over each corpus: what `--new` starts from."""
    found: dict[str, RunEntry] = {}
    for run in runs:
        if run.corpus and run.status in ENDED:
            if run.corpus not in found or run.created_at > found[run.corpus].created_at:
                found[run.corpus] = run
    return found


def check_options(keep: int | None, older_than_days: float | None, named: Sequence[str]) -> None:
    if keep is not None and keep < 1:
        raise PruneError(f"--keep {keep}: keep at least 1 run (the newest complete run over a corpus is always kept)")
    if older_than_days is not None and older_than_days < 0:
        raise PruneError(f"--older-than {older_than_days:g}: give a number of days, 0 or more")
    if keep is None and older_than_days is None and not named:
        raise PruneError("say what to prune: --keep N, --older-than DAYS, or run ids")


def verdict(
    runs: Sequence[RunEntry],
    now: datetime,
    keep: int | None = None,
    older_than_days: float | None = None,
    named: Sequence[str] = (),
) -> Verdict:
    """What a prune removes and why the rest stays. Named runs are pruned as asked, unless they
    must stay; ``keep`` and ``older_than_days`` both narrow what goes when both are given."""
    check_options(keep, older_than_days, named)
    busy = [r.run_id for r in runs if r.status in IN_PROGRESS]
    if busy:
        raise PruneError(f"run {busy[0]} is in progress ({len(busy)} in all): prune when no run is planning or running")
    by_id = {r.run_id: r for r in runs}
    missing = [name for name in named if name not in by_id]
    if missing:
        raise PruneError(f"no run {missing[0]!r} to prune; `prism runs` lists the runs")
    newest = sorted(runs, key=lambda r: r.created_at, reverse=True)
    reasons = {r.run_id: f"the newest complete run over {c}" for c, r in newest_complete(runs).items()}
    for named_run in named:
        if named_run in reasons:
            raise PruneError(f"run {named_run} is {reasons[named_run]}: a `--new` night starts from it")
    cutoff = now - timedelta(days=older_than_days) if older_than_days is not None else None
    for rank, run in enumerate(newest):
        if run.run_id in reasons:
            continue
        if named:
            if run.run_id not in named:
                reasons[run.run_id] = "not named"
        elif keep is not None and rank < keep:
            reasons[run.run_id] = f"among the newest {keep}"
        elif cutoff is not None and run.created_at > cutoff:
            reasons[run.run_id] = f"newer than {older_than_days:g} days"
    return Verdict(
        pruned=[r for r in newest if r.run_id not in reasons],
        kept=[r for r in newest if r.run_id in reasons],
        reasons=reasons,
    )
