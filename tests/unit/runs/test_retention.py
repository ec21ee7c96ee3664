"""Which runs a prune removes: the newest N kept, the newest complete run over each corpus always,
named runs as asked, and nothing at all while a run is in progress or when asked wrongly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from prism.runs.retention import PruneError, RunEntry, verdict

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def entry(run_id: str, days_ago: float, status: str = "complete", corpus: str | None = "c") -> RunEntry:
    return RunEntry(run_id, status, corpus, NOW - timedelta(days=days_ago), 3, 0.0)


RUNS = [
    entry("r5", 0, "complete_with_failures"),
    entry("r4", 1, "interrupted"),
    entry("r3", 2),
    entry("r2", 3, corpus="other"),
    entry("r1", 40),
    entry("rows", 50, corpus=None),
]


def pruned(**kwargs) -> list[str]:
    return [r.run_id for r in verdict(RUNS, NOW, **kwargs).pruned]


def test_keep_takes_the_newest_and_never_the_newest_complete_run_of_a_corpus():
    assert pruned(keep=1) == ["r4", "r3", "r1", "rows"]  # r5 and r2: each the newest complete over its corpus
    assert pruned(keep=3) == ["r1", "rows"]
    assert verdict(RUNS, NOW, keep=1).reasons["r5"] == "the newest complete run over c"


def test_older_than_narrows_what_keep_removes():
    assert pruned(older_than_days=30) == ["r1", "rows"]
    assert pruned(keep=1, older_than_days=30) == ["r1", "rows"]
    assert pruned(keep=1, older_than_days=0.5) == ["r4", "r3", "r1", "rows"]


def test_named_runs_go_as_asked_unless_a_night_starts_from_them():
    assert pruned(named=["r1", "r4"]) == ["r4", "r1"]
    with pytest.raises(PruneError, match="r5 is the newest complete run over c"):
        verdict(RUNS, NOW, named=["r5"])
    with pytest.raises(PruneError, match="no run 'nope'"):
        verdict(RUNS, NOW, named=["nope"])


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"keep": 0}, "--keep 0"),
        ({"older_than_days": -1}, "--older-than -1"),
        ({}, "say what to prune"),
    ],
)
def test_bad_options_are_refused(kwargs, says):
    with pytest.raises(PruneError, match=says):
        verdict(RUNS, NOW, **kwargs)


def test_nothing_goes_while_a_run_is_in_progress():
    busy = [*RUNS, entry("now", 0, "running")]
    with pytest.raises(PruneError, match="run now is in progress"):
        verdict(busy, NOW, keep=1)
